converted.append(step)
x = x.float()
