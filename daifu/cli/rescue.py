"""`daifu rescue [N]`: the rescues of a workspace, listed, or the N-th described with how to load it.

Reads only the manifests (JSON): listing rescues never loads torch nor any saved state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daifu.rescue.load import listing, shard_status
from daifu.rescue.save import size_text

USAGE_ERROR = 2


def main(workspace: Path, number: int | None) -> int:
    """Print the list, or rescue `number` of it (1 is the oldest); the exit status."""
    try:
        found = listing(workspace)
    except (OSError, ValueError) as error:
        print(f"daifu rescue: cannot read the rescues in {workspace}: {error}")
        return 1
    if not found:
        print(f"No rescue in {workspace / 'rescue'}.")
        return 0
    if number is None:
        _table(found)
        return 0
    if not 1 <= number <= len(found):
        print(f"daifu rescue: no rescue {number} in {workspace} ({len(found)} there)")
        return USAGE_ERROR
    folder, manifest = found[number - 1]
    print("\n".join(describe(folder, manifest, workspace)))
    return 0


def _table(found: list[tuple[Path, dict[str, Any]]]) -> None:
    header = ("#", "time", "why", "where", "objects", "size", "folder")
    rows = [header]
    for index, (folder, manifest) in enumerate(found, 1):
        shards = manifest.get("shards")
        objects = f"{len(shards)} shards" if shards else str(len(manifest.get("objects", [])))
        size = "-" if shards else size_text(int(manifest.get("state_bytes", 0)))
        rows.append((str(index), str(manifest.get("time", "")).replace("T", " ")[:19], _why(manifest),
                     f"{manifest.get('function', '?')} ({Path(str(manifest.get('file', '?'))).name}:"
                     f"{manifest.get('line', '?')})", objects, size, str(folder)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


def describe(folder: Path, manifest: dict[str, Any], workspace: Path) -> list[str]:
    """A rescue in words: why, where, what was saved and what was not, and the lines that load it."""
    lines = [f"Rescue {manifest.get('name', folder.name)} in {folder}: {_why(manifest)}, "
             f"{str(manifest.get('time', '')).replace('T', ' ')[:19]}",
             f"  at {manifest.get('function', '?')} ({manifest.get('file', '?')}:{manifest.get('line', '?')}): "
             f"{manifest.get('statement', '')}"]
    status = shard_status(folder, manifest)
    if status:
        lines.append("  shards: " + ", ".join(f"rank {rank} {'saved' if there else 'MISSING'}"
                                             for rank, there in status.items()))
        return lines + [f"  load one rank's shard: daifu.rescued({str(workspace)!r}, rank=R)"]
    lines += [f"  {o['name']}: {o['kind']} ({o['class']}, on {', '.join(o.get('devices', [])) or 'the host'})"
              for o in manifest.get("objects", [])]
    lines.append(f"  random generators: {', '.join(manifest.get('rng', [])) or 'none'}")
    position = manifest.get("position", {})
    lines.append("  position: " + (", ".join(f"{k}={v}" for k, v in position.items()) or "no numbers"))
    lines += [f"  NOT saved: {u['what']}: {u['why']}" for u in manifest.get("not_saved", [])]
    names = [o["name"] for o in manifest.get("objects", [])]
    lines += ["  load it:", f"    rescue = daifu.rescued({str(workspace)!r})"]
    lines += [f"    rescue.load({name!r}, {name.split(':')[-1].split('.')[-1].split('[')[0]})" for name in names]
    lines.append("    rescue.restore_rng()")
    return lines


def _why(manifest: dict[str, Any]) -> str:
    if manifest.get("why") == "signal":
        return str(manifest.get("signal", "a signal"))
    error = manifest.get("exception") or {}
    return f"{error.get('type', 'crash')}: {str(error.get('message', ''))[:60]}"
