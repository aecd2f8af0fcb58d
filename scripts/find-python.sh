#!/usr/bin/env bash
# Prints the interpreter sluice's tests should run on: Python 3.13 (the Lambda runtime's version)
# where the machine has it, else the newest Python >= 3.11 it can find.
set -euo pipefail
candidates=()
if command -v pyenv >/dev/null 2>&1; then
  root="$(pyenv root)"
  for v in $(ls -1 "$root/versions" 2>/dev/null | grep -E '^3\.(1[1-9])(\.[0-9]+)?$' | sort -t. -k2,2nr -k3,3nr); do
    candidates+=("$root/versions/$v/bin/python3")
  done
fi
for n in python3.13 python3.14 python3.12 python3.11 python3; do
  p="$(command -v "$n" 2>/dev/null || true)"
  [ -n "$p" ] && candidates+=("$p")
done
best=""; best_minor=0
for p in "${candidates[@]}"; do
  [ -x "$p" ] || continue
  minor="$("$p" -c 'import sys; print(sys.version_info[1] if sys.version_info[0] == 3 else 0)' 2>/dev/null || echo 0)"
  if [ "$minor" = 13 ]; then echo "$p"; exit 0; fi
  if [ "$minor" -ge 11 ] && [ "$minor" -gt "$best_minor" ]; then best="$p"; best_minor="$minor"; fi
done
if [ -z "$best" ]; then echo "no Python >= 3.11 found" >&2; exit 1; fi
echo "$best"
