"""Issue 11's scope example: a module-level function reads `lr`, a local of the wrapped `main`.

Under the prototype a function vaccinated with `transform(globals())` keeps its variables in the
module's globals, so `step()` sees `lr`, and the module code after `main()` sees `out`.
"""

import daifu

daifu.TRANSFORM_REGISTRY['REPEAT_ACTIONS'] = None  # a repeated experiment with nothing to repair


def step():
    return lr * 2  # 'lr' is a local of main()


@daifu.transform(globals())
def main():
    lr = 0.5
    out = step()


main()
print('RESULT out', out)
daifu.log_program_end(out)
