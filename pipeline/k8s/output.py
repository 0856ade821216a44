"""The YAML the manifests are written as (literal blocks for scripts, rule configs and dashboards) and the
kustomization.yaml that lists them."""

from __future__ import annotations

from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    pass


def _str_presenter(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    if "\n" in value:  # scripts, rule configs and dashboards stay readable as literal blocks
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _str_presenter)


def dump_yaml(docs: list[dict[str, Any]]) -> str:
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120, allow_unicode=True)


def kustomization(files: list[str], namespace: str) -> dict[str, Any]:
    # fifo: `kubectl kustomize` emits the resources in this order, unchanged
    return {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "namespace": namespace,
            "resources": list(files), "sortOptions": {"order": "fifo"}}
