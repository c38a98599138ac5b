"""A virtual cluster of "nodes" on this machine (not a test module).

Each node is a network namespace with its own hostname (a UTS namespace made
by ``unshare --uts`` for the processes started in it), joined by a veth pair
to a bridge that lives in a namespace of its own. Addresses come from a
private test range and exist only inside those namespaces; the host's own
namespace gets no interface, address or route. Everything is torn down on
exit, failures included (processes killed, namespaces deleted), and
``leftovers()`` lets a test check that nothing remained.

Needs root and network namespaces (CI has both); ``skip_reason()`` says why
not where they are missing, so that tests skip with it instead of passing.
"""

import os
import shutil
import signal
import subprocess
import time

# Used only by openreg-only tests (tests/target.py).
openreg_only = True

SUBNET = "10.213.7"  # 10.213.7.<node + 1>/24, inside the cluster's namespaces only
ETC_NETNS = "/etc/netns"


def _ip(*args, ns=None, check=True):
    cmd = (["ip", "netns", "exec", ns] if ns else []) + ["ip", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=check)


def skip_reason():
    """None if a cluster can be built here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if not shutil.which("ip") or not shutil.which("unshare"):
        return "iproute2 (ip) and util-linux (unshare) are needed"
    probe = f"orprobe{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        return f"cannot create a network namespace: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
    return None


class Cluster:
    """``with Cluster(2) as c: c.spawn(0, argv)``: node i is reachable at
    ``c.addr(i)`` from every node, and its processes see hostname ``c.host(i)``."""

    def __init__(self, nodes: int):
        self.nodes = nodes
        self.tag = f"or{os.getpid() % 100000}"
        self.bridge_ns = f"{self.tag}br"
        self.procs = []

    def ns(self, i):
        return f"{self.tag}n{i}"

    def host(self, i):
        return f"node{i}"

    def addr(self, i):
        return f"{SUBNET}.{i + 1}"

    def __enter__(self):
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def _build(self):
        subprocess.run(["ip", "netns", "add", self.bridge_ns], check=True, timeout=30)
        _ip("link", "add", "br0", "type", "bridge", ns=self.bridge_ns)
        _ip("link", "set", "br0", "up", ns=self.bridge_ns)
        # Each node resolves every node's hostname: `ip netns exec` mounts the
        # files of /etc/netns/<namespace>/ over /etc's (iproute2's own way).
        hosts = "127.0.0.1 localhost\n" + "".join(
            f"{self.addr(i)} {self.host(i)}\n" for i in range(self.nodes))
        self.made_etc_netns = not os.path.isdir(ETC_NETNS)
        for i in range(self.nodes):
            ns = self.ns(i)
            os.makedirs(os.path.join(ETC_NETNS, ns), exist_ok=True)
            with open(os.path.join(ETC_NETNS, ns, "hosts"), "w") as f:
                f.write(hosts)
            subprocess.run(["ip", "netns", "add", ns], check=True, timeout=30)
            # The pair is made inside the node and its far end moved straight
            # into the bridge's namespace: no interface ever exists in ours.
            _ip("link", "add", "eth0", "type", "veth", "peer", "name", f"p{i}",
                "netns", self.bridge_ns, ns=ns)
            _ip("link", "set", f"p{i}", "master", "br0", ns=self.bridge_ns)
            _ip("link", "set", f"p{i}", "up", ns=self.bridge_ns)
            _ip("addr", "add", f"{self.addr(i)}/24", "dev", "eth0", ns=ns)
            _ip("link", "set", "eth0", "up", ns=ns)
            _ip("link", "set", "lo", "up", ns=ns)

    def spawn(self, i, argv, env=None, **kw):
        """Start argv on node i (its network, its hostname), in a process
        group of its own; stdout/stderr captured unless given."""
        cmd = ["ip", "netns", "exec", self.ns(i), "unshare", "--uts", "sh", "-c",
               f'hostname {self.host(i)} && exec "$@"', "sh", *argv]
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        p = subprocess.Popen(cmd, env=env, text=True, start_new_session=True, **kw)
        self.procs.append(p)
        return p

    def link(self, i, up: bool):
        """Take node i's link down or up (from the bridge's side)."""
        _ip("link", "set", f"p{i}", "up" if up else "down", ns=self.bridge_ns)

    def pids(self, i):
        r = subprocess.run(["ip", "netns", "pids", self.ns(i)], capture_output=True, text=True,
                           timeout=30)
        return [int(p) for p in r.stdout.split()]

    def kill_node(self, i, sig=signal.SIGKILL):
        for pid in self.pids(i):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for i in range(self.nodes):
            self.kill_node(i)
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        deadline = time.monotonic() + 10
        while any(self.pids(i) for i in range(self.nodes)) and time.monotonic() < deadline:
            time.sleep(0.05)
        for ns in [self.ns(i) for i in range(self.nodes)] + [self.bridge_ns]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
            shutil.rmtree(os.path.join(ETC_NETNS, ns), ignore_errors=True)
        if getattr(self, "made_etc_netns", False):
            try:
                os.rmdir(ETC_NETNS)
            except OSError:
                pass

    def __exit__(self, *exc):
        self.close()
        return False

    def leftovers(self):
        """What is left of this cluster (namespaces, processes): [] after close()."""
        names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                               timeout=30).stdout
        left = [line.split()[0] for line in names.splitlines()
                if line.split() and line.split()[0].startswith(self.tag)]
        left += [f"pid {p.pid}" for p in self.procs if p.poll() is None]
        if os.path.isdir(ETC_NETNS):
            left += [f"{ETC_NETNS}/{d}" for d in os.listdir(ETC_NETNS) if d.startswith(self.tag)]
        return left
