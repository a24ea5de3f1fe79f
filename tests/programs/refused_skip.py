"""Rows that miss their key twice: automatic mode's only candidate, skipping the iteration, would pass
over two of them, more than its budget allows, so its trial refuses it and the crash raises."""

import daifu

daifu.configure(mode="automatic", approve="auto", bot_url=None)


@daifu.transform
def total_of(rows):
    total = 0
    for row in rows:
        total = total + int(row["n"])
    return total


print(total_of([{"n": "1"}, {"m": "2"}, {"m": "3"}, {"n": "4"}]))
