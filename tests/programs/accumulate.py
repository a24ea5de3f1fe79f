"""A loop that meets a bad item halfway, then prints its final state for the test to check.

`REPEAT_ACTIONS` (JSON in the environment) sets the seed switch, as a seed user's script would.
"""

import json
import os
import sys

import daifu

if os.environ.get("REPEAT_ACTIONS"):
    daifu.TRANSFORM_REGISTRY["REPEAT_ACTIONS"] = json.loads(os.environ["REPEAT_ACTIONS"])


@daifu.transform
def main():
    total = 0
    seen = []
    data = [1, 2, "3", 4]
    for item in data:
        total = total + item
        seen.append(item)
    print(f"FINAL total={total} seen={seen} trace={sys.gettrace()}")
    return total


if __name__ == "__main__":
    main()
