"""The task data: text pairs and their file loaders, and the chess games the chess tasks draw from."""

from trainer.data.pairs import DataFileError, LoadReport, Pair, file_stream, load_jsonl

__all__ = ["DataFileError", "LoadReport", "Pair", "file_stream", "load_jsonl"]
