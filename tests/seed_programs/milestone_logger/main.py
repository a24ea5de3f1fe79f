"""The large-scale programs' record: `DIRECTLY_RETRY`, `daifu.logger` milestones, a record copy.

A transient fault (the second all-reduce of step 3 fails once) is retried without asking
(`DIRECTLY_RETRY`). The program writes its own milestones with `daifu.logger` (the prototype's
loguru logger, whose lines land in `experiment_record.log`), and ends with
`log_program_end(value, folder, True)`: a milestone run, so the record is copied to
`runs_log/experiment_record_<time>.log` even though no `REPEAT_ACTIONS` is set.
"""

import torch

import daifu

daifu.TRANSFORM_REGISTRY['DIRECTLY_RETRY'] = True
print_val = [0]
failures = [3]


def all_reduce(tensor, step):
    if step in failures:
        failures.remove(step)
        raise RuntimeError('NCCL watchdog thread terminated with exception: collective timed out')
    return tensor


@daifu.transform(globals())
def main():
    torch.manual_seed(0)
    w = torch.zeros(2)
    target = torch.tensor([0.5, -1.0])
    daifu.logger.info('Program init end')
    for step in range(6):
        grad = all_reduce(2 * (w - target), step)
        w = w - 0.25 * grad
        if step % 2 == 1:
            daifu.logger.info('Program Default Checkpoint {}'.format(step))
    print_val[0] = round(float(((w - target) ** 2).sum()), 6)
    print('RESULT', print_val[0])
    daifu.log_program_end(print_val[0], 'runs_log', True)


main()
