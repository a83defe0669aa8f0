"""Which of the dev clusters that can run side by side on one machine: its node names, subnet, bridge and ports.

Development tooling only. Instance 0 is the cluster every command brings up unless told otherwise
(nodes ``n01..``, subnet ``10.78.0.0/24``, bridge ``sebr0``, slurmctld/slurmd/slurmdbd on 6817-6819,
MariaDB on 3307). Instance ``k`` differs in everything two clusters would otherwise share on one
host: the node names (``/etc/hosts`` maps a name to one address, so two clusters cannot both have
an ``n01``), the subnet and bridge, the guard route, and the ports. That is what lets the real-cluster
tests run in two pytest workers at once, each with a cluster of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_elastic.dev.plumbing import DevClusterError

NODE_LETTERS = "nmpqrstu"
"""The first letter of the node names of each instance (instance 0: ``n01``, instance 1: ``m01``, ...)."""
MAX_INSTANCES = len(NODE_LETTERS)
PORT_STRIDE = 10
"""Instance ``k`` runs slurmctld, slurmd and slurmdbd on the base ports plus ``k * PORT_STRIDE``."""
BASE_CTLD_PORT = 6817
BASE_SLURMD_PORT = 6818
BASE_DBD_PORT = 6819
BASE_DB_PORT = 3307
NETNS_PREFIX = "se-"


@dataclass(frozen=True, slots=True)
class Instance:
    """Dev cluster number ``number`` (0 .. :data:`MAX_INSTANCES` - 1) and what it holds on the host."""

    number: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.number, bool) or not isinstance(self.number, int) \
                or not 0 <= self.number < MAX_INSTANCES:
            raise DevClusterError(f"dev cluster instance {self.number!r}: must be an integer from 0 to "
                                  f"{MAX_INSTANCES - 1} (one per letter of {NODE_LETTERS!r})")

    @property
    def node_letter(self) -> str:
        """The letter the node names start with."""
        return NODE_LETTERS[self.number]

    @property
    def subnet_prefix(self) -> str:
        """The first three octets of the nodes' subnet (bridge at ``.1``, node ``i`` at ``.(10+i)``)."""
        return f"10.78.{self.number}"

    @property
    def bridge(self) -> str:
        """The host bridge the nodes' veths hang on."""
        return f"sebr{self.number}"

    @property
    def guard_route(self) -> tuple[str, ...]:
        """An unreachable route for the subnet, so its traffic never leaves by the default route."""
        return ("unreachable", f"{self.subnet_prefix}.0/24", "metric", "4000")

    @property
    def ctld_port(self) -> int:
        return BASE_CTLD_PORT + PORT_STRIDE * self.number

    @property
    def slurmd_port(self) -> int:
        return BASE_SLURMD_PORT + PORT_STRIDE * self.number

    @property
    def dbd_port(self) -> int:
        return BASE_DBD_PORT + PORT_STRIDE * self.number

    @property
    def db_port(self) -> int:
        return BASE_DB_PORT + self.number


DEFAULT_INSTANCE = Instance()
"""Instance 0: the cluster every command brings up unless told otherwise."""
