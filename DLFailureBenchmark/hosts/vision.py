"""The larger image classifiers, scaled to a CPU: a ResNet-style and a ViT-style network on 32x32 colour images.

The images are ten classes of smooth random colour patterns plus noise, generated per step from
`(seed, step)` like `cnn.batch`.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from DLFailureBenchmark.hosts.common import tail_mean

CLASSES = 10
_TEMPLATES: list[torch.Tensor] = []


def _templates() -> torch.Tensor:
    if not _TEMPLATES:
        coarse = torch.rand(CLASSES, 3, 4, 4, generator=torch.Generator().manual_seed(4242))
        _TEMPLATES.append(F.interpolate(coarse, size=(32, 32), mode="bilinear", align_corners=False))
    return _TEMPLATES[0]


def batch(seed: int, step: int, size: int, noise: float = 1.2) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed * 100_019 + step)
    labels = torch.randint(0, CLASSES, (size,), generator=g)
    base = _templates()[labels]
    return base + noise * torch.randn(base.shape, generator=g), labels


def validation(seed: int, size: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    return batch(seed + 31, -1, size)


def conv_bn(cin: int, cout: int, size: int, stride: int) -> nn.Sequential:
    """A convolution without bias (the batch norm after it has one) and its batch norm."""
    return nn.Sequential(nn.Conv2d(cin, cout, size, stride, size // 2, bias=False), nn.BatchNorm2d(cout))


class BasicBlock(nn.Module):
    """Two 3x3 convolutions added to the input; a 1x1 projection of the input when the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.first = conv_bn(cin, cout, 3, stride)
        self.second = conv_bn(cout, cout, 3, 1)
        self.skip: nn.Module = conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = self.second(F.relu(self.first(x)))
        return F.relu(residual + self.skip(x))


class ResNet(nn.Module):
    """ResNet for CIFAR-sized images: a 3x3 stem and three stages of basic blocks (16, 32, 64 channels)."""

    def __init__(self, widths: tuple[int, ...] = (16, 32, 64)) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU())
        blocks, cin = [], widths[0]
        for index, width in enumerate(widths):
            blocks.append(BasicBlock(cin, width, 1 if index == 0 else 2))
            cin = width
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1).flatten(1))


class ViT(nn.Module):
    """Vision Transformer: 4x4 patches, a class token, learned positions, pre-norm encoder blocks."""

    def __init__(self, dim: int = 64, depth: int = 4, heads: int = 4, patch: int = 4) -> None:
        super().__init__()
        self.patches = nn.Conv2d(3, dim, patch, patch)
        tokens = (32 // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, tokens + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, dim * 2, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patches(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(len(x), -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.encoder(x))[:, 0])


def build(seed: int, model: nn.Module, lr: float = 2e-3) -> tuple[nn.Module, torch.optim.Optimizer]:
    return model, torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)


@torch.no_grad()
def metrics(model: nn.Module, val: tuple[torch.Tensor, torch.Tensor], losses: list[float],
            steps: int) -> dict[str, float]:
    model.eval()
    accuracy = float((model(val[0]).argmax(1) == val[1]).float().mean())
    model.train()
    return {"steps": steps, "final_loss": tail_mean(losses), "accuracy": accuracy}
