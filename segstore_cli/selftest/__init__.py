"""``segstore selftest``: a cluster on loopback, a checked load and faults on a schedule (after Pravega's
self-tester and Jepsen's checkers). ``runner`` composes ``cluster``, ``workload``, ``verifier``, ``faults`` and
the ``checker`` (the oracle); ``events`` is the self-checking event format; ``fault_kinds`` names the faults
(imported by ``segstore selftest --help`` without the rest)."""
