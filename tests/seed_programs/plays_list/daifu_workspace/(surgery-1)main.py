@daifu.transform(globals())
def main():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    converted = []
    losses = []
    for step, x in enumerate(make_batches()):
        out = model(x.float())
        loss = out.pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(round(loss.item(), 4))
    return losses
