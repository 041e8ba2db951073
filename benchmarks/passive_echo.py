"""The passive baseline server (PAN's t_passive): tacoma.bench._passive, run as a script.

    python benchmarks/passive_echo.py [--listen HOST:PORT] [--tls IDENTITY_FILE]
"""

from tacoma.bench._passive import FrameBuffer, decode, encode, main, set_nodelay

__all__ = ["FrameBuffer", "decode", "encode", "set_nodelay"]

if __name__ == "__main__":
    main()
