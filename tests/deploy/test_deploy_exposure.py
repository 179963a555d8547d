"""Nothing publishes the dashboard (8265, job submission = code execution) or the GCS port.

What "published" means here:
- KubeRay: reachable from outside the Kubernetes cluster. That happens through a Service of type
  NodePort or LoadBalancer (or with externalIPs), an Ingress/Route/Gateway, a hostPort, or
  hostNetwork. The head pod binding its dashboard to 0.0.0.0 does not publish it: that address
  is the pod's cluster-internal interface, which the KubeRay operator, the RayJob submitter and
  `kubectl port-forward` need. So 0.0.0.0 inside a pod is allowed exactly when none of the
  publishing paths exists, which these tests check for every pod.
- Cluster launcher (Docker with host networking on bare hosts): binding 0.0.0.0 puts the
  dashboard on the host's LAN address, so it must stay on loopback and be reached over SSH.
"""

from __future__ import annotations

import shlex

from deploy_files import (
    CLUSTER_YAML,
    containers,
    kuberay_documents,
    load_documents,
    pod_templates,
    ray_cluster_specs,
)

PUBLISHING_KINDS = {"Ingress", "Route", "Gateway", "HTTPRoute", "GRPCRoute", "TCPRoute", "IngressRoute"}
INTERNAL_SERVICE_TYPES = {None, "ClusterIP"}
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def test_no_ingress_route_or_gateway_objects():
    kinds = {doc["kind"] for doc in kuberay_documents()}
    assert not kinds & PUBLISHING_KINDS, f"publishing objects: {sorted(kinds & PUBLISHING_KINDS)}"


def test_no_external_services():
    for doc in kuberay_documents():
        if doc["kind"] == "Service":
            spec = doc.get("spec", {})
            assert spec.get("type") in INTERNAL_SERVICE_TYPES, f"Service/{doc['metadata']['name']}"
            assert not spec.get("externalIPs"), f"Service/{doc['metadata']['name']} has externalIPs"


def test_head_service_stays_cluster_internal():
    for where, spec in ray_cluster_specs():
        head = spec["headGroupSpec"]
        assert head.get("serviceType") in INTERNAL_SERVICE_TYPES, (
            f"{where}: serviceType {head.get('serviceType')}"
        )
        assert head.get("enableIngress") is not True, f"{where}: enableIngress"
        service_spec = (head.get("headService") or {}).get("spec", {})
        assert service_spec.get("type") in INTERNAL_SERVICE_TYPES, f"{where}: headService type"
        assert not service_spec.get("externalIPs"), f"{where}: headService externalIPs"


def test_no_pod_uses_the_host_network_or_host_ports():
    for where, template in pod_templates():
        assert template["spec"].get("hostNetwork") is not True, f"{where}: hostNetwork"
        for container in containers(template):
            for port in container.get("ports", []):
                assert "hostPort" not in port, f"{where}/{container['name']}: hostPort {port}"


def test_dashboard_host_is_internal_or_loopback():
    """0.0.0.0 in a pod is the pod's cluster-internal address (see the module docstring)."""
    for where, spec in ray_cluster_specs():
        host = spec["headGroupSpec"]["rayStartParams"].get("dashboard-host")
        assert host in LOOPBACK | {"0.0.0.0", None}, f"{where}: dashboard-host {host}"


def _ray_start_options(command: str) -> dict[str, str]:
    options = {}
    for word in shlex.split(command):
        if word.startswith("--") and "=" in word:
            name, value = word[2:].split("=", 1)
            options[name] = value
    return options


def test_launcher_head_binds_the_dashboard_to_loopback():
    (config,) = load_documents(CLUSTER_YAML)
    (start,) = [c for c in config["head_start_ray_commands"] if "ray start" in c]
    host = _ray_start_options(start).get("dashboard-host")
    assert host in LOOPBACK, f"head dashboard-host is {host!r}; with host networking that is the LAN"


def test_launcher_publishes_no_container_ports():
    (config,) = load_documents(CLUSTER_YAML)
    docker = config["docker"]
    for key in ("run_options", "head_run_options", "worker_run_options"):
        for option in docker.get(key, []):
            flag = option.split()[0].split("=")[0]
            assert flag not in {"-p", "--publish", "-P", "--publish-all"}, f"docker.{key}: {option}"
