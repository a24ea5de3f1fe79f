"""The second fetch fails once, as a network read might; a retry gets it."""

import daifu

calls = {"n": 0}


def fetch(i):
    calls["n"] += 1
    if calls["n"] == 2:
        raise ConnectionError("transient failure")
    return i * 10


@daifu.transform
def main():
    got = []
    for i in range(3):
        got.append(fetch(i))
    print(f"FINAL got={got} calls={calls['n']}")


if __name__ == "__main__":
    main()
