class Policy(nn.Module):
    def __init__(self):
        super(Policy, self).__init__()
        self.affine = nn.Linear(4, 8)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(F.relu(self.affine(x)))

torch.manual_seed(1)
model = Policy()
optimizer = optim.SGD(model.parameters(), lr=0.05)
