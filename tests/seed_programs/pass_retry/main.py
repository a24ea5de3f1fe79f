"""A recorded `Pass` on a transient fault.

`fetch` fails once, at step 2, the way a flaky read of a shared file system does. The recorded
play is `Pass`, which in the prototype runs the faulty statement again unchanged (its `pass`
command changes nothing before the retry): the second read succeeds and step 2's value counts.
"""

import daifu

daifu.TRANSFORM_REGISTRY['REPEAT_ACTIONS'] = ['Pass']
reads = []


def fetch(step):
    reads.append(step)
    if step == 2 and reads.count(2) == 1:
        raise OSError(5, 'Input/output error (transient)')
    return step * 10


@daifu.transform(globals())
def main():
    total = 0
    for step in range(5):
        value = fetch(step)
        total = total + value
    return total


total = main()
print('RESULT', total, reads)
daifu.log_program_end(total)
