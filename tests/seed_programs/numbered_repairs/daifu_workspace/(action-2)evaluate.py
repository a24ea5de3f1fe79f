def metric(out, y):
    return (out - y).abs().mean()
