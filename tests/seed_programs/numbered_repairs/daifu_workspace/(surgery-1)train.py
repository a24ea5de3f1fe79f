@daifu.transform(globals())
def train(model, optimizer, batches, epoch):
    lr = lrs[epoch]
    for group in optimizer.param_groups:
        group['lr'] = lr
    for x, y in batches:
        out = model(x)
        loss = F.mse_loss(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
