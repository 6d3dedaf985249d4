"""NetworkPolicies against the manifests they police: each policy's pods, and each peer it names
inside the namespace, are pods of a Deployment here, and each port it opens is one those pods
expose. Peers in other namespaces (Prometheus, the ingress controller, KEDA, DNS) are the
operator's to edit and are not in deploy/k8s, so only their shape is checked (by the schema)."""

from deploycheck.files import name_of, of_kind, pod_spec


def label_selector_matches(selector, labels):
    """Kubernetes' LabelSelector: matchLabels and matchExpressions; `{}` selects every pod."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        key, op, values = e["key"], e["operator"], e.get("values", [])
        has = key in labels
        if not {"In": has and labels[key] in values, "NotIn": not has or labels[key] not in values,
                "Exists": has, "DoesNotExist": not has}.get(op, False):
            return False
    return True


def pods(objects):
    """(Deployment name, pod labels, container ports) for every Deployment."""
    return [(name_of(d), d["spec"]["template"]["metadata"].get("labels", {}),
             [p for c in pod_spec(d)["containers"] for p in c.get("ports", [])])
            for _, d in of_kind(objects, "Deployment")]


def selected(all_pods, selector):
    return [p for p in all_pods if label_selector_matches(selector, p[1])]


def exposes(ports, rule_port):
    """Whether a NetworkPolicyPort (by name, number or range) opens a port these pods have."""
    want = rule_port.get("port")
    protocol = rule_port.get("protocol", "TCP")
    for p in ports:
        if p.get("protocol", "TCP") != protocol:
            continue
        number = p["containerPort"]
        if want is None or want == p.get("name") or want == number or (
                isinstance(want, int) and want <= number <= rule_port.get("endPort", want)):
            return True
    return False


def check_ports(where, rule_ports, targets, r):
    for rule_port in rule_ports:
        for name, _, ports in targets:
            r.check(exposes(ports, rule_port), where,
                    f"port {rule_port.get('port')}/{rule_port.get('protocol', 'TCP')} is no"
                    f" containerPort of Deployment/{name}")


def local_peers(where, peers, all_pods, r):
    """The pods of the peers that name pods of this namespace (a podSelector alone)."""
    found = []
    for peer in peers:
        if "podSelector" not in peer or "namespaceSelector" in peer:
            continue
        hit = selected(all_pods, peer["podSelector"])
        r.check(bool(hit), where, f"peer podSelector {peer['podSelector']} selects no pods of"
                " deploy/k8s: its labels must be a Deployment's pod labels")
        found.append(hit)
    return found


def check_network_policies(objects, r):
    all_pods = pods(objects)
    covered = set()
    for f, np in of_kind(objects, "NetworkPolicy"):
        where = f"{f} NetworkPolicy/{name_of(np)}"
        spec = np["spec"]
        targets = selected(all_pods, spec.get("podSelector", {}))
        if not r.check(bool(targets), where,
                       "its podSelector selects no pods of deploy/k8s"):
            continue
        covered.update(name for name, _, _ in targets)
        for rule in spec.get("ingress", []):
            local_peers(where, rule.get("from", []), all_pods, r)
            check_ports(where, rule.get("ports", []), targets, r)
        for rule in spec.get("egress", []):
            for peer_pods in local_peers(where, rule.get("to", []), all_pods, r):
                check_ports(where, rule.get("ports", []), peer_pods, r)
    for name, _, _ in all_pods:
        r.check(name in covered, "deploy/k8s",
                f"no NetworkPolicy selects the pods of Deployment/{name}")
