"""A script that knows nothing of DaiFu: `daifu run` vaccinates its main()."""

import sys


def scale(x):
    return x * 2


def main():
    values = [1, 2, None, 4]
    out = []
    for v in values:
        out.append(scale(v) + 1)
    print(f"FINAL out={out} argv={sys.argv[1:]}")


if __name__ == "__main__":
    main()
