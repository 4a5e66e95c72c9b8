"""The board: what one person has to do and watch now (requests waiting for their
approval, their own, active plans, open incidents, each queue's dead letters and their
trend), read at once (``service.py``) and said as one message (``messages.py``) that the
console's ``/queue board``, a Slack App Home and a Discord status message all show."""

from services.board.messages import board_message
from services.board.model import Board
from services.board.service import BoardReader, Snapshot

__all__ = ["Board", "BoardReader", "Snapshot", "board_message"]
