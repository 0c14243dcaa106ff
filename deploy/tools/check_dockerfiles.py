#!/usr/bin/env python3
"""Checks the Dockerfiles of deploy/docker without a Docker engine.

  * hadolint (if given with --hadolint), every rule, failing on warnings;
  * structure: at least two stages; the final stage starts from a runtime
    image (not the Rust builder), runs as a numeric non-root USER, installs
    no compiler or build tool, copies only from the builder stage or from
    the workspace's data files, EXPOSEs the ports, and has an exec-form
    ENTRYPOINT; the builder runs `cargo build --release --locked`;
  * build context: each Dockerfile has its BuildKit ignore file
    (<Dockerfile>.dockerignore); applying it to the files git tracks must
    keep every file of every Cargo workspace member, Cargo.toml and
    Cargo.lock (a too-eager ignore rule breaks the build), and must drop
    target/ and .git; with --cargo, `cargo metadata --offline`
    --locked (against Cargo.lock, as the image build resolves it) then runs
    on such a filtered copy of the repository.

Usage: check_dockerfiles.py REPO_ROOT [--hadolint BIN] [--cargo BIN]
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

EXPECTED = {
    "Dockerfile.api": {"binary": "instanceha-api", "ports": {"15869", "15868", "9464"}},
    "Dockerfile.engine": {"binary": "instanceha-engine", "ports": {"15870", "9465"}},
    "Dockerfile.openstack-sim": {"binary": "openstack-sim", "ports": {"8080"}},
    "Dockerfile.agent": {"binary": "instanceha-agent", "ports": {"15871", "9466"}},
}
BUILD_TOOLS = re.compile(
    r"\b(gcc|g\+\+|clang|cc|make|cmake|build-essential|cargo|rustc|rustup|pkg-config|libssl-dev|protobuf-compiler|protoc)\b"
)


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined."""
    out, buf = [], ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if buf and line.lstrip().startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def check_structure(path: Path, errors: list[str]):
    spec = EXPECTED[path.name]
    ins = instructions(path.read_text())
    args = {}
    for word, rest in ins:
        if word == "ARG" and "=" in rest:
            k, v = rest.split("=", 1)
            args[k.strip()] = v.strip()

    def expand(s: str) -> str:
        return re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), s)

    stages: list[dict] = []
    for word, rest in ins:
        if word == "FROM":
            parts = rest.split()
            image = expand(parts[0])
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append({"image": image, "name": name, "ins": []})
        elif stages:
            stages[-1]["ins"].append((word, rest))
    where = f"{path.name}"
    if len(stages) < 2:
        errors.append(f"{where}: not multi-stage ({len(stages)} stage)")
        return
    builder, final = stages[0], stages[-1]
    if not builder["image"].startswith("rust:"):
        errors.append(f"{where}: the builder stage should start from the official rust image, not {builder['image']}")
    if final["image"].startswith("rust:") or final["image"] == builder["image"]:
        errors.append(f"{where}: the final stage starts from the build image {final['image']}")
    if ":" not in final["image"].rsplit("/", 1)[-1]:
        errors.append(f"{where}: the final image {final['image']} has no tag")
    build = " ".join(rest for w, rest in builder["ins"] if w == "RUN")
    if f"cargo build --release --locked -p {spec['binary']}" not in build:
        errors.append(f"{where}: the builder must run `cargo build --release --locked -p {spec['binary']}`")
    users = [rest for w, rest in final["ins"] if w == "USER"]
    if not users:
        errors.append(f"{where}: the final stage sets no USER (it would run as root)")
    else:
        user = users[-1].split(":")[0]
        if not user.isdigit():
            errors.append(f"{where}: USER {users[-1]} is not numeric (Kubernetes cannot verify runAsNonRoot)")
        elif int(user) == 0:
            errors.append(f"{where}: USER is root")
    for w, rest in final["ins"]:
        if w == "RUN" and re.search(r"\b(apt-get|apt|apk|dnf|yum)\b.*\binstall\b", rest) and BUILD_TOOLS.search(rest):
            errors.append(f"{where}: the final stage installs build tools: {rest}")
        if w == "RUN" and BUILD_TOOLS.search(rest.split("&&")[0]) and "useradd" not in rest:
            errors.append(f"{where}: the final stage runs a build tool: {rest}")
        if w in ("COPY", "ADD"):
            toks = shlex.split(rest)
            src_from = [t for t in toks if t.startswith("--from=")]
            srcs = [t for t in toks if not t.startswith("--")][:-1]
            if w == "ADD":
                errors.append(f"{where}: use COPY, not ADD, in the final stage")
            if src_from:
                if src_from[0] != f"--from={builder['name']}":
                    errors.append(f"{where}: the final stage copies from {src_from[0]}, not the builder")
            elif any(s in (".", "./") or s.endswith(".rs") or s.endswith("Cargo.toml") for s in srcs):
                errors.append(f"{where}: the final stage copies sources: {rest}")
    exposed = set()
    for w, rest in final["ins"]:
        if w == "EXPOSE":
            exposed |= {p.split("/")[0] for p in rest.split()}
    if not spec["ports"] <= exposed:
        errors.append(f"{where}: EXPOSE {sorted(spec['ports'] - exposed)} missing")
    entry = [rest for w, rest in final["ins"] if w == "ENTRYPOINT"]
    if not entry or not entry[-1].startswith("["):
        errors.append(f"{where}: the final stage needs an exec-form ENTRYPOINT")
    elif spec["binary"] not in entry[-1]:
        errors.append(f"{where}: ENTRYPOINT does not run {spec['binary']}")


# --- .dockerignore -----------------------------------------------------------


def ignore_patterns(path: Path) -> list[tuple[bool, re.Pattern]]:
    rules = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pat = line[1:] if negate else line
        pat = pat.strip("/")
        # Go filepath.Match plus "**" (any number of directories), as
        # BuildKit's patternmatcher does.
        rx, i = "", 0
        while i < len(pat):
            if pat.startswith("**/", i):
                rx += "(?:.*/)?"
                i += 3
            elif pat.startswith("**", i):
                rx += ".*"
                i += 2
            else:
                c = pat[i]
                rx += "[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c)
                i += 1
        rules.append((negate, re.compile(rf"^{rx}(?:/.*)?$")))
    return rules


def ignored(rel: str, rules) -> bool:
    out = False
    for negate, rx in rules:
        if rx.match(rel):
            out = not negate
    return out


def check_context(repo: Path, docker: Path, errors: list[str], cargo: str | None, notes: list[str]) -> int:
    tracked = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z"], check=True, capture_output=True, text=True
    ).stdout.split("\0")
    tracked = [t for t in tracked if t]
    root = tomllib.loads((repo / "Cargo.toml").read_text())
    members = [m.rstrip("/") for m in root["workspace"]["members"]]
    needed = [t for t in tracked if t in ("Cargo.toml", "Cargo.lock") or any(t.startswith(m + "/") for m in members)]
    checked = 0
    for name in EXPECTED:
        ign = docker / f"{name}.dockerignore"
        if not ign.is_file():
            errors.append(f"{name}: no {ign.name} next to it (BuildKit's per-Dockerfile ignore file)")
            continue
        rules = ignore_patterns(ign)
        dropped = [t for t in needed if ignored(t, rules)]
        if dropped:
            errors.append(f"{ign.name}: drops workspace files the build needs: {dropped[:5]}")
        for must in ("target/debug/x", "api-service/target/x", ".git/HEAD"):
            if not ignored(must, rules):
                errors.append(f"{ign.name}: does not exclude {must.split('/x')[0]}")
        checked += 1
        if cargo and name == "Dockerfile.api":
            with tempfile.TemporaryDirectory() as tmp:
                for t in tracked:
                    if not ignored(t, rules) and (repo / t).is_file():
                        dst = Path(tmp) / t
                        dst.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copy2(repo / t, dst)
                host = subprocess.run(
                    ["rustc", "-vV"], capture_output=True, text=True
                ).stdout.partition("host: ")[2].split("\n")[0] or "x86_64-unknown-linux-gnu"
                # What the image build runs, `cargo build --locked`, first
                # resolves the workspace against Cargo.lock: do that much.
                r = subprocess.run(
                    [cargo, "metadata", "--offline", "--locked", "--filter-platform", host,
                     "--format-version", "1"],
                    cwd=tmp, capture_output=True, text=True,
                )
                if r.returncode != 0 and "--offline was specified" in r.stderr:
                    notes.append("cargo's local cache lacks crates: the Cargo.lock check ran without "
                                 "dependencies (build the workspace once to enable it)")
                    r = subprocess.run(
                        [cargo, "metadata", "--offline", "--no-deps", "--format-version", "1"],
                        cwd=tmp, capture_output=True, text=True,
                    )
                if r.returncode != 0:
                    errors.append(
                        f"cargo metadata --locked on the filtered build context failed "
                        f"(the image build would too): {r.stderr.strip()[-400:]}"
                    )
    return checked


def main(argv) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("repo")
    ap.add_argument("--hadolint")
    ap.add_argument("--cargo")
    args = ap.parse_args(argv[1:])
    repo = Path(args.repo).resolve()
    docker = repo / "deploy" / "docker"
    errors: list[str] = []
    files = [docker / n for n in EXPECTED]
    for f in files:
        if not f.is_file():
            errors.append(f"{f}: missing")
    files = [f for f in files if f.is_file()]
    if args.hadolint:
        r = subprocess.run(
            [args.hadolint, "--no-color", "--failure-threshold", "style", *map(str, files)], capture_output=True, text=True
        )
        if r.returncode != 0:
            errors += [f"hadolint: {line}" for line in (r.stdout + r.stderr).splitlines() if line.strip()]
    for f in files:
        check_structure(f, errors)
    notes: list[str] = []
    contexts = check_context(repo, docker, errors, args.cargo, notes)
    for n in notes:
        print(f"  NOTE: {n}")
    for e in errors:
        print(f"  ERROR: {e}")
    print(
        f"  {len(files)} Dockerfiles: {'hadolint (all rules), ' if args.hadolint else ''}"
        f"multi-stage/non-root/no-build-tools structure, {contexts} build contexts"
        f"{' (cargo metadata --locked on the filtered context)' if args.cargo else ''}"
    )
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
