"""Every rendered manifest checked before it is written: strict OpenAPI validation (kubernetes-validate) of
the built-in kinds, structure of the CRDs (LeaderWorkerSet, PodMonitor, PrometheusRule), whose pod
templates are still checked against the core PodTemplate schema."""

from __future__ import annotations

from typing import Any


KUBERNETES_VERSION = "1.37.0"
"""The Kubernetes release whose OpenAPI schemas every built-in manifest is validated against."""
BUILTIN_GROUPS = ("v1", "apps/v1", "batch/v1", "policy/v1", "autoscaling/v2", "rbac.authorization.k8s.io/v1")


def validate_document(doc: dict[str, Any], version: str = KUBERNETES_VERSION) -> list[str]:
    """Problems with one manifest: strict OpenAPI validation for built-in kinds, structure for CRDs."""
    import kubernetes_validate

    where = f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"

    def strict(obj: dict[str, Any], label: str) -> list[str]:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            path = "/".join(str(p) for p in error.path)
            return [f"{label}: {error.message} (at {path or '/'})"]
        return []

    if doc.get("apiVersion") in BUILTIN_GROUPS:
        return strict(doc, where)
    problems = [f"{where}: missing {key}" for key in ("apiVersion", "kind", "metadata", "spec") if not doc.get(key)]
    spec = doc.get("spec") or {}
    kind = doc.get("kind")
    if kind == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate") or {}
        if not isinstance(lwt.get("size"), int) or lwt["size"] < 2:
            problems.append(f"{where}: leaderWorkerTemplate.size must be an integer >= 2")
        for key in ("leaderTemplate", "workerTemplate"):
            template = lwt.get(key)
            if not template:
                problems.append(f"{where}: leaderWorkerTemplate.{key} is missing")
                continue
            problems += strict({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "check"}, "template": template},
                               f"{where} {key}")
    elif kind == "PodMonitor":
        if not (spec.get("selector") or {}).get("matchLabels"):
            problems.append(f"{where}: spec.selector.matchLabels is empty")
        for endpoint in spec.get("podMetricsEndpoints") or [{}]:
            if not endpoint.get("port"):
                problems.append(f"{where}: a podMetricsEndpoint has no port name")
    elif kind == "PrometheusRule":
        for group in spec.get("groups") or []:
            for rule in group.get("rules") or []:
                if not (rule.get("record") or rule.get("alert")) or not rule.get("expr"):
                    problems.append(f"{where}: rule without record/alert and expr in group {group.get('name')}")
                elif rule["expr"].count("(") != rule["expr"].count(")"):
                    problems.append(f"{where}: unbalanced parentheses in {rule.get('record') or rule.get('alert')}")
        if not spec.get("groups"):
            problems.append(f"{where}: no rule groups")
    else:
        problems.append(f"{where}: unknown apiVersion {doc.get('apiVersion')} (no schema to check it against)")
    return problems


def validate_files(files: dict[str, list[dict[str, Any]]], version: str = KUBERNETES_VERSION) -> list[str]:
    return [f"{name}: {p}" for name, docs in files.items() for doc in docs for p in validate_document(doc, version)]
