"""What a node (kubelet, containerd, the CNI plugins) may change on this machine outside the fixture's folder, read
before it starts and put back after it stops: :func:`snapshot`, :func:`restore`, :func:`differences`.

Read: the sysctls the kubelet and kube-proxy may set (:data:`SYSCTLS`) and the one the CNI bridge plugin sets, the
iptables rules of every table and the nftables tables (iptables-nft creates one on first use), the mount points
under the node's folders, the kubepods cgroups of every hierarchy, the files under the folders a kubelet or
containerd writes by fixed path (:data:`WATCHED`), and the network links. Only what a node makes is read (other work
on this machine makes cgroups and mounts of its own). :func:`restore` undoes what differs, deepest first (sysctls
written back, new cgroups and files removed, new veth and bridge links deleted, new KUBE-/CNI- chains flushed and
deleted, new tables deleted); a mount left under the fixture's folder is its node's to unmount (node.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# The kubelet's kernel tunables, set at start (kubernetes@v1.36.3:pkg/kubelet/cm/container_manager_linux.go,
# setupKernelTunables), and ip_forward, which the CNI bridge plugin turns on for a gateway bridge (node_config.py
# configures none).
SYSCTLS = (
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "net.ipv4.ip_forward",
    # kube-proxy's, which node_proxy.py tells it to leave (route_localnet for NodePorts on loopback).
    "net.ipv4.conf.all.route_localnet",
)
# Written by fixed path whatever the flags say: the kubelet's container log links (ContainerLogsDir) and its device
# plugin socket folder (pkg/kubelet/apis/deviceplugin DevicePluginPath under /var/lib/kubelet); containerd's shim
# sockets (/run/containerd/s); CNI's cache (/var/lib/cni); the rest are defaults the fixture overrides, watched in
# case one is not.
WATCHED = (
    "/var/lib/kubelet",
    "/var/log/containers",
    "/var/log/pods",
    "/usr/libexec/kubernetes",
    "/run/netns",
    "/run/containerd",
    "/var/lib/containerd",
    "/opt/containerd",
    "/var/lib/cni",
    "/etc/cni",
    "/opt/cni",
)
CGROUP_ROOT = Path("/sys/fs/cgroup")
# The fixture's bridges are named so (node_net.py).
LINK_PREFIX = "kftrain"
# iptables-save's lines that change by themselves: comments (a date); and a chain's counters, kept as its name and
# policy (":KUBE-SERVICES -").
_COMMENT = re.compile(r"^#")
_COUNTERS = re.compile(r" \[\d+:\d+\]$")


@dataclass(frozen=True)
class HostState:
    sysctls: dict[str, str]
    iptables: dict[str, tuple[str, ...]]  # by command, its rules
    mounts: frozenset[str]
    cgroups: frozenset[str]
    paths: frozenset[str]
    links: frozenset[str]
    nft_tables: frozenset[str] = frozenset()  # "ip nat": the tables iptables-nft creates on first use


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def _iptables() -> dict[str, tuple[str, ...]]:
    rules = {}
    for command in ("iptables-save", "ip6tables-save"):
        if shutil.which(command):
            out = subprocess.run([command], capture_output=True, text=True, check=False).stdout
            rules[command] = tuple(_COUNTERS.sub("", line) for line in out.splitlines() if not _COMMENT.match(line))
    return rules


def _nft_tables() -> frozenset[str]:
    if not shutil.which("nft"):
        return frozenset()
    out = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=False).stdout
    return frozenset(line.removeprefix("table ").strip() for line in out.splitlines() if line.startswith("table "))


def mount_points(under: tuple[str, ...]) -> list[str]:
    """The mount points at or below any of ``under``, in the order they were mounted (/proc/self/mountinfo's fifth
    field; octal escapes kept)."""
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return [p for p in points if any(p == root or p.startswith(root.rstrip("/") + "/") for root in under)]


def _cgroups() -> frozenset[str]:
    found = set()
    for hierarchy in CGROUP_ROOT.iterdir() if CGROUP_ROOT.is_dir() else ():
        if hierarchy.is_symlink() or not hierarchy.is_dir():
            continue  # cpu,cpuacct links to cpu
        for folder, dirs, _ in os.walk(hierarchy):
            found.update(os.path.join(folder, d) for d in dirs if "kubepods" in os.path.join(folder, d))
    return frozenset(found)


def _paths() -> frozenset[str]:
    found = set()
    for root in WATCHED:
        if os.path.lexists(root):
            found.add(root)
        for folder, dirs, files in os.walk(root):
            found.update(os.path.join(folder, name) for name in (*dirs, *files))
    return frozenset(found)


def _links() -> frozenset[str]:
    return frozenset(os.listdir("/sys/class/net"))


def snapshot(folders: tuple[str, ...] = ()) -> HostState:
    """The host now; mounts under :data:`WATCHED` and ``folders`` (the node's own)."""
    return HostState(
        sysctls={name: _sysctl_path(name).read_text().strip() for name in SYSCTLS if _sysctl_path(name).exists()},
        iptables=_iptables(),
        mounts=frozenset(mount_points((*WATCHED, *folders))),
        cgroups=_cgroups(),
        paths=_paths(),
        links=_links(),
        nft_tables=_nft_tables(),
    )


def differences(before: HostState, after: HostState) -> list[str]:
    """What ``after`` has that ``before`` had not, or lacks, one line each (none: the host is as it was)."""
    out = [
        f"sysctl {name} = {after.sysctls.get(name)} (was {value})"
        for name, value in before.sysctls.items()
        if after.sysctls.get(name) != value
    ]
    for command, rules in before.iptables.items():
        now = after.iptables.get(command, ())
        out += [f"{command}: added {r}" for r in now if r not in rules]
        out += [f"{command}: removed {r}" for r in rules if r not in now]
    for kind, was, now in (
        ("mount", before.mounts, after.mounts),
        ("cgroup", before.cgroups, after.cgroups),
        ("path", before.paths, after.paths),
        ("link", before.links, after.links),
        ("nft table", before.nft_tables, after.nft_tables),
    ):
        out += [f"{kind} added: {x}" for x in sorted(now - was)]
        out += [f"{kind} removed: {x}" for x in sorted(was - now)]
    return out


def restore(before: HostState, folders: tuple[str, ...] = ()) -> list[str]:
    """Undo what the host has now that ``before`` had not; what could not be undone, one line each."""
    failed = []
    now = snapshot(folders)
    for name, value in before.sysctls.items():
        if now.sysctls.get(name) != value:
            try:
                _sysctl_path(name).write_text(value)
            except OSError as e:
                failed.append(f"sysctl {name}: {e}")
    for link in sorted(x for x in now.links - before.links if x.startswith(("veth", LINK_PREFIX))):
        result = subprocess.run(["ip", "link", "delete", link], capture_output=True, text=True, check=False)
        if result.returncode:
            failed.append(f"link {link}: {result.stderr.strip()}")
    for command, rules in now.iptables.items():
        failed += _drop_chains(command, before.iptables.get(command, ()), rules)
    # A table iptables-nft created (kube-proxy's first rule in it) stays, empty, until deleted; only nft can.
    for table in sorted(now.nft_tables - before.nft_tables):
        result = subprocess.run(["nft", "delete", "table", *table.split()], capture_output=True, text=True, check=False)
        if result.returncode:
            failed.append(f"nft table {table}: {result.stderr.strip()}")
    # Deepest first: a cgroup goes once its children have.
    for folder in sorted(now.cgroups - before.cgroups, key=len, reverse=True):
        try:
            os.rmdir(folder)
        except OSError as e:
            failed.append(f"cgroup {folder}: {e}")
    for path in sorted(now.paths - before.paths, key=len, reverse=True):
        with contextlib.suppress(FileNotFoundError):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
    return failed


def _drop_chains(save: str, before: tuple[str, ...], now: tuple[str, ...]) -> list[str]:
    """Delete the rules added since ``before`` that jump to or sit in a new KUBE-/CNI- chain, then the chains."""
    command = save.removesuffix("-save")
    failed: list[str] = []
    table = ""
    new_chains: list[tuple[str, str]] = []
    for line in now:
        if line.startswith("*"):
            table = line[1:]
        elif line.startswith(":") and line not in before and line[1:].startswith(("KUBE-", "CNI-")):
            new_chains.append((table, line[1:].split()[0]))
    names = {chain for _, chain in new_chains}
    table = ""
    for line in now:
        if line.startswith("*"):
            table = line[1:]
        elif line.startswith("-A ") and line not in before:
            parts = shlex.split(line)  # a comment's words are one quoted argument
            if parts[1] in names or any(p in names for p in parts[2:]):
                args = [command, "-t", table, "-D", *parts[1:]]
                if subprocess.run(args, capture_output=True, check=False).returncode:
                    failed.append(f"{command} -t {table}: could not delete {line}")
    # All flushed before any is deleted: a chain another one jumps to cannot be deleted (kube-proxy's chain each).
    for flag in ("-F", "-X"):
        for table, chain in new_chains:
            subprocess.run([command, "-t", table, flag, chain], capture_output=True, check=False)
    return failed
