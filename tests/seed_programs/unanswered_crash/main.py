"""More crashes than recorded repairs: the run must end, and the record must say so.

The recorded action fixes the first bad batch only; the second bad batch crashes again and
`REPEAT_ACTIONS` has nothing left for it. The prototype ends the program (exit status 1) with
`Repair Fails` as the record's last line and no `Program End`, so no record copy is made.
"""

import torch

import daifu

daifu.TRANSFORM_REGISTRY['REPEAT_ACTIONS'] = ['Action']


@daifu.transform(globals())
def main():
    torch.manual_seed(0)
    batches = [torch.randn(2, 3) for _ in range(5)]
    batches[1] = torch.randn(2, 4)
    batches[3] = torch.randn(2, 4)
    weight = torch.randn(3, 1)
    outputs = []
    for x in batches:
        outputs.append(x @ weight)
    print('RESULT', len(outputs))


main()
daifu.log_program_end(len(outputs))
