"""A stand-in torch for the benchmarks' engine children (see ../README.md)."""

__version__ = "0.0-fake"


class cuda:
    @staticmethod
    def synchronize() -> None:
        return None

    @staticmethod
    def get_device_name() -> str:
        return "Fake GPU"
