"""A function with no loop that crashes once: there is no iteration to skip."""

import daifu


@daifu.transform
def main():
    value = int("three")
    print(f"FINAL value={value}")


if __name__ == "__main__":
    main()
