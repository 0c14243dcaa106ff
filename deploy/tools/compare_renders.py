#!/usr/bin/env python3
"""Compares two renders of a kustomization (the same resources, the same
content, in any order). Usage: compare_renders.py OURS.yaml THEIRS.yaml"""

import difflib
import json
import sys

import yaml


def load(path):
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    return {(d["apiVersion"], d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in docs}


def main(argv):
    ours, theirs = load(argv[1]), load(argv[2])
    problems = 0
    for key in sorted(set(ours) | set(theirs)):
        if key not in theirs or key not in ours:
            print(f"  ERROR: {'/'.join(key[1:])} only in {'ours' if key in ours else 'kustomize'}")
            problems += 1
        elif ours[key] != theirs[key]:
            problems += 1
            a = json.dumps(ours[key], sort_keys=True, indent=1).splitlines()
            b = json.dumps(theirs[key], sort_keys=True, indent=1).splitlines()
            print(f"  ERROR: {'/'.join(key[1:])} differs:")
            print("\n".join("    " + line for line in list(difflib.unified_diff(a, b, "ours", "kustomize", lineterm=""))[:30]))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
