"""A stand-in torch for the benchmark's offline child (see ../README.md)."""

__version__ = "0.0-fake"


class cuda:
    @staticmethod
    def synchronize() -> None:
        return None

    @staticmethod
    def get_device_name() -> str:
        return "Fake GPU"
