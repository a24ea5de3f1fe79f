@daifu.transform(globals())
def train(model, optimizer, loader):
    model.train()
    done = []
    for step, (x, y) in enumerate(loader):
        try:
            optimizer.zero_grad()
            out = model(x)
            if classify:
                loss = F.cross_entropy(out, y)
                loss.backward()
                optimizer.step()
            done.append(step)
        except:
            continue
    return done
