#!/usr/bin/env python3
"""free_port.py [N]: print N (default 1) distinct loopback ports free now, picked below the
kernel's ephemeral range as tests/free_port.h picks them: no outgoing connection or port-0 bind
of a rank can take one between this check and the bind of the root."""
import random
import socket
import sys

lo = 32768
try:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        lo = int(f.read().split()[0])
except (OSError, ValueError):
    pass


def free(taken):
    for _ in range(2000):
        p = random.randrange(10000, lo) if lo > 11000 else 0
        if p in taken:
            continue
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", p))
            return s.getsockname()[1]
        except OSError:
            pass
        finally:
            s.close()
    raise SystemExit("free_port.py: no free port")


ports = []
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 1):
    ports.append(free(ports))
print(*ports)
