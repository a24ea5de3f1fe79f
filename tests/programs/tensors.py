"""A shape mismatch between two small tensors."""

import torch

import daifu


@daifu.transform
def main():
    x = torch.ones(2, 3)
    w = torch.ones(4, 5)
    y = x @ w
    print(f"FINAL y={tuple(y.shape)}")


if __name__ == "__main__":
    main()
