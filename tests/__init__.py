"""r1build's tests, one folder per package of r1build/ (cache/, lock/, build/, ...), one file per module where
it stands alone; helpers are modules of this package (``from tests.generate.chat_server import ChatServer``).
Sample projects, good and deliberately broken, live in ``packages/`` (not Python packages).
"""
