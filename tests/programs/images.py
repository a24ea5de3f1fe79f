"""Images fed to a linear layer without being flattened: a shape bug the rules engine knows."""

import torch

import daifu


@daifu.transform
def main():
    model = torch.nn.Linear(16, 2)
    seen = []
    for step in range(3):
        images = torch.ones(4, 1, 4, 4) * step
        out = model(images)
        seen.append(tuple(out.shape))
    print(f"FINAL steps={len(seen)} shapes={seen}")


if __name__ == "__main__":
    main()
