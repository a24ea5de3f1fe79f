"""A loop whose faulty statement calls a method that fails on one item: the bug is in the callee."""

import daifu


class Scaler:
    def __init__(self, factor):
        self.factor = factor

    def apply(self, item):
        return item * self.factor + 0


@daifu.transform
def main():
    scaler = Scaler(2)
    total = 0
    seen = []
    for item in [1, 2, "3", 4]:
        total = total + scaler.apply(item)
        seen.append(item)
    print(f"FINAL total={total} seen={seen}")
    return total


if __name__ == "__main__":
    main()
