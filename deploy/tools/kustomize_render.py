#!/usr/bin/env python3
"""A small kustomize for deploy/kubernetes, for machines without kustomize.

It renders a kustomization directory the way `kustomize build` (v5) does,
for the features deploy/kubernetes uses and no others:

  resources          files and directories holding a kustomization
  namespace          set on every namespaced resource
  labels             pairs added to metadata.labels (includeSelectors and
                     includeTemplates false only)
  configMapGenerator files/literals, with kustomize's content hash suffix,
                     and the new names written into the pod specs that
                     reference them
  images             name -> newName / newTag / digest
  patches            strategic-merge patches given by path (no target),
                     with the Kubernetes merge keys of the lists we patch

Anything else in a kustomization is refused with an error, so an overlay
cannot silently use a feature this renderer would get wrong. deploy/validate
compares its output with `kubectl kustomize` / `kustomize build` whenever
one of them is installed.

Usage: kustomize_render.py DIR  (prints the YAML stream)
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import sys
from pathlib import Path

import yaml

SUPPORTED_KEYS = {
    "apiVersion",
    "kind",
    "namespace",
    "labels",
    "resources",
    "configMapGenerator",
    "images",
    "patches",
}

# Kinds that are not namespaced (the ones that may appear here).
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "PriorityClass",
    "StorageClass",
    "PersistentVolume",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
}

# Strategic merge: list fields merged by a key (Kubernetes' patchMergeKey).
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
}

POD_SPEC_PATHS = {
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
    "Pod": ("spec",),
}


class RenderError(Exception):
    pass


def load_yaml_stream(path: Path) -> list[dict]:
    with path.open() as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    for d in docs:
        if not isinstance(d, dict) or "kind" not in d or "apiVersion" not in d:
            raise RenderError(f"{path}: a document without apiVersion/kind")
    return docs


def key_of(doc: dict) -> tuple[str, str, str, str]:
    md = doc.get("metadata", {})
    group = doc["apiVersion"].rpartition("/")[0]
    return (group, doc["kind"], md.get("namespace", ""), md.get("name", ""))


# --- configMapGenerator ------------------------------------------------------


def go_json(value) -> str:
    """json.Marshal of Go: sorted keys, no spaces, HTML-escaped <, >, &."""
    s = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return (
        s.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def configmap_hash(data: dict[str, str]) -> str:
    # kustomize's api/hasher: sha256 over {"data", "kind", "name"} where the
    # name lookup ("metadata/name" as one path element) finds nothing, so
    # the name is "" — reproduced here as kustomize computes it.
    encoded = go_json({"data": data, "kind": "ConfigMap", "name": ""})
    digest = hashlib.sha256(encoded.encode()).hexdigest()[:10]
    return digest.translate(str.maketrans("013ae", "ghkmt"))


def generate_configmaps(base: Path, gens: list[dict]) -> tuple[list[dict], dict[str, str]]:
    docs, renames = [], {}
    for gen in gens:
        unknown = set(gen) - {"name", "files", "literals"}
        if unknown:
            raise RenderError(f"configMapGenerator {gen.get('name')}: unsupported {sorted(unknown)}")
        name = gen["name"]
        data: dict[str, str] = {}
        for entry in gen.get("files", []):
            key, _, rel = entry.partition("=") if "=" in entry else (os.path.basename(entry), "", entry)
            path = base / rel
            if not path.is_file():
                raise RenderError(f"configMapGenerator {name}: no file {path}")
            data[key] = path.read_text()
        for lit in gen.get("literals", []):
            k, sep, v = lit.partition("=")
            if not sep:
                raise RenderError(f"configMapGenerator {name}: bad literal {lit!r}")
            data[k] = v
        hashed = f"{name}-{configmap_hash(data)}"
        renames[name] = hashed
        docs.append(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": hashed}, "data": data}
        )
    return docs, renames


def pod_spec(doc: dict):
    path = POD_SPEC_PATHS.get(doc["kind"])
    node = doc
    if path is None:
        return None
    for p in path:
        node = node.get(p) if isinstance(node, dict) else None
        if node is None:
            return None
    return node


def all_containers(spec: dict):
    for field in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(field, []) or []


def rename_configmap_refs(docs: list[dict], renames: dict[str, str]) -> None:
    if not renames:
        return
    for doc in docs:
        spec = pod_spec(doc)
        if spec is None:
            continue
        for vol in spec.get("volumes", []) or []:
            cm = vol.get("configMap")
            if cm and cm.get("name") in renames:
                cm["name"] = renames[cm["name"]]
            for src in (vol.get("projected") or {}).get("sources", []) or []:
                cm = src.get("configMap")
                if cm and cm.get("name") in renames:
                    cm["name"] = renames[cm["name"]]
        for c in all_containers(spec):
            for env in c.get("env", []) or []:
                ref = (env.get("valueFrom") or {}).get("configMapKeyRef")
                if ref and ref.get("name") in renames:
                    ref["name"] = renames[ref["name"]]
            for ef in c.get("envFrom", []) or []:
                ref = ef.get("configMapRef")
                if ref and ref.get("name") in renames:
                    ref["name"] = renames[ref["name"]]


# --- strategic merge patches -------------------------------------------------


def smp(target, patch, field: str | None = None):
    if isinstance(patch, dict):
        if any(k.startswith("$") for k in patch):
            raise RenderError(f"patch directive {sorted(k for k in patch if k.startswith('$'))} not supported")
        if not isinstance(target, dict):
            return copy.deepcopy(patch)
        out = dict(target)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            elif k in out:
                out[k] = smp(out[k], v, k)
            else:
                out[k] = copy.deepcopy(v)
        return out
    if isinstance(patch, list):
        key = MERGE_KEYS.get(field or "")
        if key is None or not isinstance(target, list):
            return copy.deepcopy(patch)
        out = [copy.deepcopy(x) for x in target]
        for item in patch:
            if not isinstance(item, dict) or key not in item:
                raise RenderError(f"patch list {field}: an item without its merge key {key!r}")
            for i, existing in enumerate(out):
                if isinstance(existing, dict) and existing.get(key) == item[key]:
                    out[i] = smp(existing, item, None)
                    break
            else:
                out.append(copy.deepcopy(item))
        return out
    return copy.deepcopy(patch)


def apply_patches(base: Path, docs: list[dict], patches: list) -> list[dict]:
    for entry in patches:
        if not isinstance(entry, dict) or set(entry) != {"path"}:
            raise RenderError(f"patches: only {{path: FILE}} entries are supported, not {entry!r}")
        for patch in load_yaml_stream(base / entry["path"]):
            pk = key_of(patch)
            matches = [
                i
                for i, d in enumerate(docs)
                if key_of(d)[:2] == pk[:2]
                and key_of(d)[3] == pk[3]
                and (not pk[2] or key_of(d)[2] == pk[2])
            ]
            if len(matches) != 1:
                raise RenderError(
                    f"{entry['path']}: patch for {pk[1]}/{pk[3]} matches {len(matches)} resources"
                )
            i = matches[0]
            docs[i] = smp(docs[i], patch)
    return docs


# --- the other transformers --------------------------------------------------


def set_namespace(docs: list[dict], namespace: str) -> None:
    for doc in docs:
        if doc["kind"] not in CLUSTER_SCOPED:
            doc.setdefault("metadata", {})["namespace"] = namespace


def add_labels(docs: list[dict], labels: list[dict]) -> None:
    for entry in labels:
        unknown = set(entry) - {"pairs", "includeSelectors", "includeTemplates"}
        if unknown or entry.get("includeSelectors") or entry.get("includeTemplates"):
            raise RenderError(
                "labels: only pairs with includeSelectors/includeTemplates false are supported"
            )
        for doc in docs:
            doc.setdefault("metadata", {}).setdefault("labels", {}).update(entry["pairs"])


def split_image(image: str) -> tuple[str, str, str]:
    name, digest = (image.split("@", 1) + [""])[:2]
    tag = ""
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
    return name, tag, digest


def set_images(docs: list[dict], images: list[dict]) -> None:
    for img in images:
        unknown = set(img) - {"name", "newName", "newTag", "digest"}
        if unknown:
            raise RenderError(f"images: unsupported {sorted(unknown)}")
        for doc in docs:
            spec = pod_spec(doc)
            if spec is None:
                continue
            for c in all_containers(spec):
                name, tag, digest = split_image(c.get("image", ""))
                if name != img["name"]:
                    continue
                name = img.get("newName", name)
                if "digest" in img:
                    c["image"] = f"{name}@{img['digest']}"
                elif "newTag" in img:
                    c["image"] = f"{name}:{img['newTag']}"
                else:
                    c["image"] = name + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")


# --- build -------------------------------------------------------------------


def build(directory: Path) -> list[dict]:
    directory = directory.resolve()
    kfile = directory / "kustomization.yaml"
    if not kfile.is_file():
        raise RenderError(f"{directory}: no kustomization.yaml")
    k = yaml.safe_load(kfile.read_text()) or {}
    unknown = set(k) - SUPPORTED_KEYS
    if unknown:
        raise RenderError(f"{kfile}: fields this renderer does not support: {sorted(unknown)}")
    if k.get("kind", "Kustomization") != "Kustomization":
        raise RenderError(f"{kfile}: kind must be Kustomization")

    docs: list[dict] = []
    for res in k.get("resources", []):
        path = directory / res
        if path.is_dir():
            docs.extend(build(path))
        elif path.is_file():
            docs.extend(load_yaml_stream(path))
        else:
            raise RenderError(f"{kfile}: resource {res} does not exist")

    generated, renames = generate_configmaps(directory, k.get("configMapGenerator", []))
    docs.extend(generated)

    docs = apply_patches(directory, docs, k.get("patches", []))
    if "namespace" in k:
        set_namespace(docs, k["namespace"])
    add_labels(docs, k.get("labels", []))
    set_images(docs, k.get("images", []))
    rename_configmap_refs(docs, renames)

    seen = set()
    for d in docs:
        if key_of(d) in seen:
            raise RenderError(f"{kfile}: duplicate resource {key_of(d)}")
        seen.add(key_of(d))
    return docs


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        docs = build(Path(argv[1]))
    except RenderError as e:
        print(f"kustomize_render: {e}", file=sys.stderr)
        return 1
    yaml.safe_dump_all(docs, sys.stdout, sort_keys=True, default_flow_style=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
