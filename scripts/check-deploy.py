"""Renders Arbiter's kustomizations and validates every object they make.

Run by scripts/check-deploy, which installs kubernetes-validate (and with it
jsonschema and PyYAML) into a venv and says what is checked.
"""

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import jsonschema
import yaml
from kubernetes_validate import utils as kv


def write_placeholders(tree: pathlib.Path) -> None:
    """Writes a placeholder for each file a generator of a kustomization in
    `tree` reads, so that it renders without the real secrets. An env file
    gets the keys that replacements read from its object."""
    kustomizations = [(k, yaml.safe_load(k.read_text())) for k in tree.rglob("kustomization.yaml")]
    keys: dict[str, set[str]] = {}
    for _, doc in kustomizations:
        for replacement in doc.get("replacements") or []:
            source = replacement.get("source", {})
            field = source.get("fieldPath", "")
            if field.startswith("data."):
                keys.setdefault(source.get("name", ""), set()).add(field.removeprefix("data."))
    for path, doc in kustomizations:
        generators = (doc.get("secretGenerator") or []) + (doc.get("configMapGenerator") or [])
        for generator in generators:
            for entry in generator.get("files") or []:
                target = path.parent / entry.split("=", 1)[-1]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text("placeholder\n")
            for entry in generator.get("envs") or []:
                target = path.parent / entry
                target.parent.mkdir(parents=True, exist_ok=True)
                names = sorted(keys.get(generator["name"], set())) or ["PLACEHOLDER"]
                target.write_text("".join(f"{name}=PLACEHOLDER\n" for name in names))


def render(tree: pathlib.Path, kustomization: str) -> list[dict]:
    result = subprocess.run(
        ["kubectl", "kustomize", str(tree / kustomization)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"kubectl kustomize {kustomization} failed:\n{result.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def where(error: jsonschema.ValidationError) -> str:
    return "/".join(str(p) for p in error.absolute_path) or "(top)"


def check_schema(doc: dict, version: str, keda: jsonschema.protocols.Validator) -> list[str]:
    if doc.get("apiVersion", "").startswith("keda.sh/"):
        if doc.get("kind") != "ScaledObject":
            return [f"no schema for {doc.get('kind')} {doc.get('apiVersion')}: add one to deploy/k8s/schema/"]
        return [f"{where(e)}: {e.message}" for e in keda.iter_errors(doc)]
    try:
        kv.validate(doc, version, strict=True)
    except kv.ValidationError as e:
        return [f"{where(e)}: {e.message}"]
    except kv.SchemaNotFoundError as e:
        return [e.message]
    return []


def check_references(docs: list[dict]) -> list[str]:
    """Each Secret, ConfigMap and PVC a pod uses, and each scale target, exists."""
    have = {(d["kind"], d["metadata"]["name"]) for d in docs}
    problems = []

    def need(kind: str, name: str, user: str) -> None:
        if (kind, name) not in have:
            problems.append(f"{user}: uses {kind} {name}, which is not among the rendered objects")

    for d in docs:
        user = f"{d['kind']}/{d['metadata']['name']}"
        spec = d.get("spec", {})
        if d["kind"] == "ScaledObject":
            target = spec.get("scaleTargetRef", {})
            need(target.get("kind", "Deployment"), target.get("name", ""), user)
        pod = spec.get("template", {}).get("spec", {}) if d["kind"] in ("Deployment", "StatefulSet", "Job") else {}
        claims = {t["metadata"]["name"] for t in spec.get("volumeClaimTemplates", [])}
        for volume in pod.get("volumes", []):
            if "secret" in volume:
                need("Secret", volume["secret"]["secretName"], user)
            if "configMap" in volume:
                need("ConfigMap", volume["configMap"]["name"], user)
            if "persistentVolumeClaim" in volume:
                need("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"], user)
        mounted = {v["name"] for v in pod.get("volumes", [])} | claims
        for container in pod.get("initContainers", []) + pod.get("containers", []):
            for source in container.get("envFrom", []):
                for kind, key in (("Secret", "secretRef"), ("ConfigMap", "configMapRef")):
                    if key in source and not source[key].get("optional"):
                        need(kind, source[key]["name"], user)
            for mount in container.get("volumeMounts", []):
                if mount["name"] not in mounted:
                    problems.append(f"{user}: mounts volume {mount['name']}, which the pod does not have")
    return problems


WEB = "arbiter-web"


def runs_web(doc: dict) -> bool:
    pod = doc.get("spec", {}).get("template", {}).get("spec", {})
    return any((c.get("command") or [None])[0] == WEB for c in pod.get("containers", []))


def check_exposure(docs: list[dict]) -> list[str]:
    """The web console is reached from inside the cluster alone: no Ingress in
    a kustomization (the example is applied on purpose), only ClusterIP
    Services select its pod, and the pod has no host port nor the host's
    network. Its plain HTTP beyond loopback is said on purpose."""
    problems = []
    webs = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet") and runs_web(d)]
    if not webs:
        problems.append(f"no Deployment runs {WEB}")
    for d in docs:
        user = f"{d['kind']}/{d['metadata']['name']}"
        if d["kind"] == "Ingress":
            problems.append(f"{user}: an Ingress in the kustomization; the web console's is an example "
                            "(deploy/k8s/examples/), applied on purpose")
    for web in webs:
        user = f"{web['kind']}/{web['metadata']['name']}"
        template = web["spec"]["template"]
        labels = template.get("metadata", {}).get("labels", {})
        pod = template["spec"]
        if pod.get("hostNetwork"):
            problems.append(f"{user}: runs on the host's network")
        for container in pod.get("containers", []):
            if any("hostPort" in port for port in container.get("ports", [])):
                problems.append(f"{user}: container {container['name']} has a hostPort")
            args = container.get("command", [])[1:] + container.get("args", [])
            listen = [a.split("=", 1)[1] for a in args if a.startswith("--listen=")]
            if listen and not listen[0].startswith("127.0.0.1:") and "--plain-http-beyond-loopback" not in args:
                problems.append(f"{user}: listens on {listen[0]} without --plain-http-beyond-loopback "
                                "(arbiter-web would refuse to start)")
        services = [
            d for d in docs
            if d["kind"] == "Service" and (selector := d.get("spec", {}).get("selector"))
            and all(labels.get(k) == v for k, v in selector.items())
        ]
        if not services:
            problems.append(f"{user}: no Service selects its pod")
        for service in services:
            spec = service["spec"]
            name = f"Service/{service['metadata']['name']}"
            kind = spec.get("type", "ClusterIP")
            if kind != "ClusterIP" or spec.get("externalIPs"):
                how = f"type {kind}" + (", externalIPs" if spec.get("externalIPs") else "")
                problems.append(f"{name}: exposes {WEB} beyond the cluster ({how}); it must be ClusterIP: "
                                "an Ingress that speaks TLS goes in front (deploy/k8s/examples/web-ingress.yaml)")
    return problems


def check_examples(folder: pathlib.Path, base: list[dict], version: str,
                   keda: jsonschema.protocols.Validator) -> tuple[int, list[str]]:
    """Each example's objects against the schemas, and each Service an Ingress
    of them routes to among the base's objects."""
    have = {(d["kind"], d["metadata"]["name"]) for d in base}
    count, problems = 0, []
    for path in sorted(folder.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            count += 1
            name = f"{path.name}: {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
            problems += [f"{name}: {p}" for p in check_schema(doc, version, keda)]
            if doc.get("kind") != "Ingress":
                continue
            backends = [p["backend"] for r in doc["spec"].get("rules", []) for p in r.get("http", {}).get("paths", [])]
            for backend in backends:
                service = backend.get("service", {}).get("name", "")
                if ("Service", service) not in have:
                    problems.append(f"{name}: routes to Service {service}, which the base does not make")
    return count, problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kubernetes-version", required=True)
    parser.add_argument("--schema", required=True, type=pathlib.Path)
    parser.add_argument("tree", type=pathlib.Path, help="the folder holding the kustomizations")
    parser.add_argument("kustomizations", nargs="+", help="folders under the tree to render")
    parser.add_argument("--examples", type=pathlib.Path,
                        help="a folder of example manifests (not in a kustomization) to validate "
                             "against the schemas and the first kustomization's objects")
    args = parser.parse_args()

    schema = json.loads(args.schema.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    keda = jsonschema.Draft202012Validator(schema)
    failed = False
    rendered: list[dict] = []
    with tempfile.TemporaryDirectory() as scratch:
        tree = pathlib.Path(scratch) / args.tree.name
        # A copy without the real secrets (git-ignored folders named secrets).
        shutil.copytree(args.tree, tree, ignore=shutil.ignore_patterns("secrets"))
        write_placeholders(tree)
        for kustomization in args.kustomizations:
            label = os.path.normpath(args.tree / kustomization)
            docs = render(tree, kustomization)
            problems = []
            for doc in docs:
                name = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
                problems += [f"{name}: {p}" for p in check_schema(doc, args.kubernetes_version, keda)]
            problems += check_references(docs)
            problems += check_exposure(docs)
            rendered = rendered or docs
            if not docs:
                problems.append("renders no object")
            for problem in problems:
                print(f"{label}: {problem}", file=sys.stderr)
            kinds = sorted({d["kind"] for d in docs})
            verdict = "INVALID" if problems else "valid"
            print(f"{label}: {len(docs)} objects ({', '.join(kinds)}) {verdict} "
                  f"against Kubernetes {args.kubernetes_version} and KEDA's ScaledObject schema")
            failed |= bool(problems)
    if args.examples:
        count, problems = check_examples(args.examples, rendered, args.kubernetes_version, keda)
        if not count:
            problems.append("no example")
        for problem in problems:
            print(f"{args.examples}: {problem}", file=sys.stderr)
        verdict = "INVALID" if problems else "valid"
        print(f"{args.examples}: {count} objects {verdict} against Kubernetes {args.kubernetes_version}")
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
