"""Many processes, one GPU each: the rank a process is (``set_rank``), and the memory of its peers
that its graphs may read (``peers``), and the peer tables a program writes after capture, which graphs read
(``registrations``: the engines' custom all-reduce). SAVE records both per graph; LOAD checks both before anything
replays (docs/DESIGN.md, "Many GPUs: peer memory")."""

from __future__ import annotations

from .identity import check_rank, current_rank, rank_here, set_rank
from .peers import check_peers, peers_for_save
from .registrations import PeerRegistration, PeerRegistrations, rewrite_peer_registrations

__all__ = [
    "PeerRegistration",
    "PeerRegistrations",
    "check_peers",
    "check_rank",
    "current_rank",
    "peers_for_save",
    "rank_here",
    "rewrite_peer_registrations",
    "set_rank",
]
