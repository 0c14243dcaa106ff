#!/usr/bin/env python3
"""Checks that every setting deploy/ gives the services is a real one.

The settings schema is read from the Rust source, not kept here: starting
at `Settings` in api-service/src/config.rs and engine-service/src/config.rs,
every `pub field: Type` of every struct reachable from it (structs found
anywhere in the workspace by name), with its type (bool, integers, String,
SocketAddr, durations via humantime_serde, Vec, Option, nested structs).
Both services deny unknown keys, so an unknown key here is a service that
does not start.

Checked:
  * TOML files (the ConfigMaps' and the compose stack's): every key exists,
    every value has the right type (durations in humantime syntax, listen
    addresses as IP:PORT);
  * environment overrides set in manifests and compose (INSTANCEHA_* for
    the API, INSTANCEHA_ENGINE_* for the engine): the key path exists.

Usage: check_config.py REPO_ROOT api|engine FILE.toml... [--env NAME=VALUE ...]
       check_config.py REPO_ROOT --all   (what deploy/validate runs)
"""

from __future__ import annotations

import ipaddress
import os
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOTS = {
    "api": ("api-service/src/config.rs", "INSTANCEHA_", "INSTANCEHA_CONFIG"),
    "engine": ("engine-service/src/config.rs", "INSTANCEHA_ENGINE_", "INSTANCEHA_ENGINE_CONFIG"),
    # The agent's files are checked by check_agent.py; its one variable in
    # the DaemonSet (the node's heartbeat address) here, with the others'.
    "agent": ("agent/src/config.rs", "INSTANCEHA_AGENT_", "INSTANCEHA_AGENT_CONFIG"),
}

# Settings announced by the telemetry work (issue 6) that may not be in the
# source yet. While a root Settings has no such field, these keys are
# accepted with a loud warning (the service would refuse the file until the
# code lands); once the field exists, the source decides like for any key.
PENDING = {
    "api": {"telemetry": {"prometheus_listen": "SocketAddr"}},
    "engine": {"telemetry": {"prometheus_listen": "SocketAddr"}},
    "agent": {},
}

SKIP_DIRS = {"target", ".git", "deploy", "node_modules", ".venv"}

HUMANTIME = re.compile(
    r"^\s*(\d+\s*(nsec|ns|usec|us|msec|ms|seconds|second|secs|sec|s|minutes|minute|mins|min|m|"
    r"hours|hour|hrs|hr|h|days|day|d|weeks|week|w|months|month|M|years|year|y)\s*)+$"
)


@dataclass
class Field:
    name: str
    ty: str
    humantime: bool
    source: Path | None = None


STRUCT_RE = re.compile(r"pub struct (\w+)\s*\{", re.M)
ENUM_RE = re.compile(r"((?:^[ \t]*#\[[^\n]*\n|^[ \t]*///[^\n]*\n)*)^[ \t]*pub enum (\w+)\s*\{", re.M)


def serde_case(variant: str, rule: str | None) -> str:
    if rule == "lowercase":
        return variant.lower()
    if rule == "UPPERCASE":
        return variant.upper()
    if rule in ("snake_case", "SCREAMING_SNAKE_CASE"):
        out = re.sub(r"(?<!^)(?=[A-Z])", "_", variant).lower()
        return out.upper() if rule.startswith("SCREAMING") else out
    if rule == "kebab-case":
        return re.sub(r"(?<!^)(?=[A-Z])", "-", variant).lower()
    return variant


def find_enums(repo: Path) -> dict[str, list[set[str]]]:
    """Unit-variant enums as serde spells them (rename_all, rename)."""
    enums: dict[str, list[set[str]]] = {}
    for dirpath, dirnames, filenames in os.walk(repo):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")]
        for fn in filenames:
            if not fn.endswith(".rs"):
                continue
            text = (Path(dirpath) / fn).read_text(errors="replace")
            for m in ENUM_RE.finditer(text):
                rule = re.search(r'rename_all\s*=\s*"([^"]+)"', m.group(1) or "")
                depth, i = 1, m.end()
                while depth and i < len(text):
                    depth += {"{": 1, "}": -1}.get(text[i], 0)
                    i += 1
                body = text[m.end() : i - 1]
                variants, attrs = set(), ""
                for line in body.splitlines():
                    t = line.strip()
                    if t.startswith("#["):
                        attrs += t
                        continue
                    vm = re.match(r"^(\w+)\s*(,|$|=)", t)
                    if vm:
                        ren = re.search(r'rename\s*=\s*"([^"]+)"', attrs)
                        variants.add(ren.group(1) if ren else serde_case(vm.group(1), rule.group(1) if rule else None))
                    elif re.match(r"^\w+\s*[({]", t):
                        variants = None  # a data-carrying enum: not checked
                        break
                    attrs = ""
                if variants:
                    enums.setdefault(m.group(2), []).append(variants)
    return enums
FIELD_RE = re.compile(r"^\s*pub (\w+)\s*:\s*([^,]+?),?\s*$")


def find_structs(repo: Path) -> dict[str, list[tuple[Path, list[Field]]]]:
    structs: dict[str, list[tuple[Path, list[Field]]]] = {}
    for dirpath, dirnames, filenames in os.walk(repo):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")]
        for fn in filenames:
            if not fn.endswith(".rs"):
                continue
            path = Path(dirpath) / fn
            text = path.read_text(errors="replace")
            for m in STRUCT_RE.finditer(text):
                body_start = m.end()
                depth, i = 1, body_start
                while depth and i < len(text):
                    depth += {"{": 1, "}": -1}.get(text[i], 0)
                    i += 1
                body = text[body_start : i - 1]
                fields, attrs = [], []
                for line in body.splitlines():
                    s = line.strip()
                    if s.startswith("#["):
                        attrs.append(s)
                        continue
                    if s.startswith("//") or not s:
                        continue
                    fm = FIELD_RE.match(line)
                    if fm:
                        joined = " ".join(attrs)
                        if "serde(skip" in joined:
                            attrs = []
                            continue
                        rename = re.search(r'rename\s*=\s*"([^"]+)"', joined)
                        fields.append(
                            Field(
                                rename.group(1) if rename else fm.group(1),
                                fm.group(2).strip(),
                                "humantime_serde" in joined,
                                path,
                            )
                        )
                    attrs = []
                structs.setdefault(m.group(1), []).append((path, fields))
    return structs


class Schema:
    def __init__(self, repo: Path, service: str):
        self.repo = repo
        self.service = service
        self.structs = find_structs(repo)
        self.enums = find_enums(repo)
        root_file = repo / ROOTS[service][0]
        roots = [f for p, f in self.structs.get("Settings", []) if p == root_file]
        if not roots:
            raise SystemExit(f"check_config: no `pub struct Settings` in {root_file}")
        self.root = roots[0]
        self.warnings: list[str] = []

        self.crates = workspace_crates(repo)

    def crate_dir(self, path: Path) -> str:
        return path.relative_to(self.repo).parts[0]

    def struct(self, name: str, used_in: Path | None = None) -> list[Field] | None:
        """The fields of struct `name` as the file `used_in` sees it: through
        its `use ... as` aliases and imports, else its own crate, else the
        crates its crate depends on."""
        hint = None
        if used_in is not None:
            text = used_in.read_text(errors="replace")
            for m in re.finditer(r"\buse\s+([^;]+);", text):
                stmt = " ".join(m.group(1).split())
                alias = re.search(rf"(\w+)\s+as\s+{name}\b", stmt)
                if alias:
                    name = alias.group(1)
                elif not re.search(rf"\b{name}\b", stmt):
                    continue
                root = stmt.split("::", 1)[0].strip("{ ")
                hint = self.crate_dir(used_in) if root in {"crate", "self", "super"} else self.crates.get(root)
                break
        defs = self.structs.get(name)
        if not defs:
            return None
        if len(defs) > 1 and used_in is not None:
            own = self.crate_dir(used_in)
            for wanted in ([hint] if hint else []) + [own] + self.deps(own):
                narrowed = [d for d in defs if self.crate_dir(d[0]) == wanted]
                if narrowed:
                    defs = narrowed
                    break
        if len(defs) > 1:
            shapes = {tuple((f.name, f.ty) for f in fields) for _, fields in defs}
            if len(shapes) > 1:
                places = ", ".join(str(p.relative_to(self.repo)) for p, _ in defs)
                raise SystemExit(f"check_config: struct {name} is ambiguous ({places})")
        return defs[0][1]

    def deps(self, crate_dir: str) -> list[str]:
        manifest = self.repo / crate_dir / "Cargo.toml"
        if not manifest.is_file():
            return []
        data = tomllib.loads(manifest.read_text())
        names = list((data.get("dependencies") or {}).keys())
        return [self.crates[n.replace("-", "_")] for n in names if n.replace("-", "_") in self.crates]


def workspace_crates(repo: Path) -> dict[str, str]:
    """Rust crate name (package name with _) -> directory, for the members."""
    crates = {}
    root = tomllib.loads((repo / "Cargo.toml").read_text())
    for member in root.get("workspace", {}).get("members", []):
        manifest = repo / member / "Cargo.toml"
        if manifest.is_file():
            pkg = tomllib.loads(manifest.read_text()).get("package", {})
            if "name" in pkg:
                crates[pkg["name"].replace("-", "_")] = Path(member).parts[0]
    return crates


def strip(ty: str, wrapper: str) -> str | None:
    m = re.fullmatch(rf"(?:[\w:]*::)?{wrapper}<(.+)>", ty.strip())
    return m.group(1).strip() if m else None


def check_value(schema: Schema, ty: str, humantime: bool, value, where: str, errors: list[str], used_in=None):
    inner = strip(ty, "Option")
    if inner is not None:
        return check_value(schema, inner, humantime, value, where, errors, used_in)
    inner = strip(ty, "Vec")
    if inner is not None:
        if not isinstance(value, list):
            errors.append(f"{where}: expected a list ({ty}), got {value!r}")
            return
        for i, v in enumerate(value):
            check_value(schema, inner, humantime, v, f"{where}[{i}]", errors, used_in)
        return
    base = ty.split("::")[-1]
    if humantime or base == "Duration":
        if not isinstance(value, str) or not HUMANTIME.match(value):
            errors.append(f"{where}: {value!r} is not a humantime duration (e.g. \"30s\", \"5m\")")
        return
    if base == "bool":
        if not isinstance(value, bool):
            errors.append(f"{where}: expected true/false, got {value!r}")
        return
    if base in {"u8", "u16", "u32", "u64", "usize", "i32", "i64"}:
        if not isinstance(value, int) or isinstance(value, bool) or (base[0] == "u" and value < 0):
            errors.append(f"{where}: expected an integer ({base}), got {value!r}")
        return
    if base in {"f32", "f64"}:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            errors.append(f"{where}: expected a number, got {value!r}")
        return
    if base in {"String", "Secret", "PathBuf"}:
        if not isinstance(value, str):
            errors.append(f"{where}: expected a string, got {value!r}")
        return
    if base == "SocketAddr":
        ok = False
        if isinstance(value, str):
            host, _, port = value.rpartition(":")
            try:
                ipaddress.ip_address(host.strip("[]"))
                ok = port.isdigit() and 0 < int(port) < 65536
            except ValueError:
                ok = False
        if not ok:
            errors.append(f"{where}: {value!r} is not IP:PORT")
        return
    fields = schema.struct(base, used_in)
    if fields is None:
        variants = schema.enums.get(base)
        if variants and len(variants) == 1:
            if value not in variants[0]:
                errors.append(f"{where}: {value!r} is not one of {sorted(variants[0])}")
            return
        # A type parsed from a string, or an enum defined twice: type only.
        if not isinstance(value, (str, int, bool)):
            errors.append(f"{where}: unexpected value {value!r} for {base}")
        return
    if not isinstance(value, dict):
        errors.append(f"{where}: expected a table ({base}), got {value!r}")
        return
    check_table(schema, fields, value, where, errors)


def check_table(schema: Schema, fields: list[Field], table: dict, where: str, errors: list[str], pending=None):
    by_name = {f.name: f for f in fields}
    for key, value in table.items():
        path = f"{where}.{key}" if where else key
        if key in by_name:
            f = by_name[key]
            check_value(schema, f.ty, f.humantime, value, path, errors, f.source)
        elif pending and key in pending:
            schema.warnings.append(
                f"[{key}] is not in {ROOTS[schema.service][0]} yet: instanceha-{schema.service} "
                f"refuses unknown sections, so this file works only once the {key} settings land"
            )
            spec = pending[key]
            if not isinstance(value, dict):
                errors.append(f"{path}: expected a table")
                continue
            for k2, v2 in value.items():
                if k2 not in spec:
                    errors.append(f"{path}.{k2}: not a known (pending) setting")
                else:
                    check_value(schema, spec[k2], False, v2, f"{path}.{k2}", errors)
        else:
            known = ", ".join(sorted(by_name)) or "none"
            errors.append(f"{path}: no such setting (known here: {known})")


def check_file(schema: Schema, path: Path) -> list[str]:
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        return [f"{path}: not TOML: {e}"]
    errors: list[str] = []
    check_table(schema, schema.root, data, "", errors, PENDING[schema.service])
    return [f"{path}: {e}" for e in errors]


def check_env(schema: Schema, name: str, where: str) -> list[str]:
    prefix = ROOTS[schema.service][1]
    if name == ROOTS[schema.service][2]:
        return []
    if not name.startswith(prefix):
        return []
    parts = name[len(prefix) :].lower().split("__")
    fields = schema.root
    pending = PENDING[schema.service]
    for i, part in enumerate(parts):
        by_name = {f.name: f for f in fields}
        if part not in by_name:
            if i == 0 and part in pending and len(parts) == 2 and parts[1] in pending[part]:
                return []
            return [f"{where}: {name} names no setting ({'.'.join(parts)})"]
        if i == len(parts) - 1:
            return []
        ty = by_name[part].ty
        for wrapper in ("Option",):
            ty = strip(ty, wrapper) or ty
        nested = schema.struct(ty.split("::")[-1], by_name[part].source)
        if nested is None:
            return [f"{where}: {name}: {'.'.join(parts[: i + 1])} is not a table"]
        fields = nested
    return []


# --- what deploy/validate checks ---------------------------------------------


def service_of_env(name: str) -> str | None:
    if name.startswith("INSTANCEHA_AGENT_"):
        return "agent"
    if name.startswith("INSTANCEHA_ENGINE_"):
        return "engine"
    if name.startswith("INSTANCEHA_"):
        return "api"
    return None


def env_of_manifests(deploy: Path):
    """(name, where) of INSTANCEHA_* variables in Kubernetes manifests."""
    for path in sorted((deploy / "kubernetes").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict):
                continue
            spec = ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
            for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
                for env in c.get("env") or []:
                    yield env["name"], f"{path.relative_to(deploy)}: container {c['name']}"


def env_of_compose(deploy: Path):
    path = deploy / "compose" / "compose.yaml"
    doc = yaml.safe_load(path.read_text())
    for svc, body in (doc.get("services") or {}).items():
        env = body.get("environment") or {}
        names = env.keys() if isinstance(env, dict) else [e.split("=", 1)[0] for e in env]
        for n in names:
            if n != "<<":
                yield n, f"compose/compose.yaml: service {svc}"


def run_all(repo: Path) -> int:
    deploy = repo / "deploy"
    schemas = {s: Schema(repo, s) for s in ROOTS}
    files = {
        "api": [deploy / "kubernetes/base/config/instanceha-api.toml", deploy / "compose/instanceha-api.toml"],
        "engine": [
            deploy / "kubernetes/base/config/instanceha-engine.toml",
            deploy / "compose/instanceha-engine.toml",
        ],
    }
    errors: list[str] = []
    checked = 0
    for service, paths in files.items():
        for p in paths:
            errors += check_file(schemas[service], p)
            checked += 1
    envs = 0
    for name, where in list(env_of_manifests(deploy)) + list(env_of_compose(deploy)):
        service = service_of_env(name)
        if service:
            errors += check_env(schemas[service], name, where)
            envs += 1
    warnings = sorted({w for s in schemas.values() for w in s.warnings})
    for w in warnings:
        print(f"  WARNING: {w}")
    for e in errors:
        print(f"  ERROR: {e}")
    print(f"  {checked} TOML files and {envs} INSTANCEHA_* variables checked against the settings structs "
          f"({sum(len(v) for v in schemas['api'].structs.values())} struct definitions read from the workspace)")
    return 1 if errors else 0


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[2] == "--all":
        return run_all(Path(argv[1]).resolve())
    if len(argv) < 4 or argv[2] not in ROOTS:
        print(__doc__, file=sys.stderr)
        return 2
    schema = Schema(Path(argv[1]).resolve(), argv[2])
    errors: list[str] = []
    args = argv[3:]
    i = 0
    while i < len(args):
        if args[i] == "--env":
            errors += check_env(schema, args[i + 1].split("=", 1)[0], "--env")
            i += 2
        else:
            errors += check_file(schema, Path(args[i]))
            i += 1
    for w in sorted(set(schema.warnings)):
        print(f"WARNING: {w}")
    for e in errors:
        print(f"ERROR: {e}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
