"""Who owns a log: owner ids, and when a previous owner's process is known to be dead.

An owner id is ``machine:pid:random``, where ``machine`` (:func:`machine_identity`) names the pid namespace
the pid belongs to. :func:`owner_is_gone` lets a new owner skip waiting out the old owner's lease (see
:mod:`segment_store.tier1.file.ledger_log`) only when that process provably cannot acknowledge anything.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path


def boot_clock() -> float:
    """Seconds on a clock that keeps counting while the machine is suspended (``CLOCK_BOOTTIME``; monotonic where
    there is none). Ownership leases are measured on it: a lease must not stand still while its owner sleeps."""
    return time.clock_gettime(_BOOT_CLOCK)


_BOOT_CLOCK = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def machine_identity() -> str:
    """Where process ids mean the same process: the host name, its boot id and this process's pid namespace
    (containers on one host share the boot id, not the namespace; two machines never share a boot id).
    Only the host name when the others cannot be read (then no owner is ever taken for dead)."""
    try:
        boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return socket.gethostname()
    return f"{socket.gethostname()}@{boot_id}/{namespace}"


def owner_is_gone(owner: str) -> bool:
    """Whether the process named in an owner id (``machine:pid:random``) is known to be dead: it ran in this
    machine's pid namespace (:func:`machine_identity`, which must have its boot id and namespace), is not
    this process, and no process has its pid (a reused pid counts as alive: then the new owner waits)."""
    machine, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if "@" not in machine or machine != machine_identity() or not pid_text.isdigit() or int(pid_text) == os.getpid():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists (another user's process)
        return False
    return False
