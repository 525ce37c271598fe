"""Code that runs in the child processes that call untrusted candidates, and the messages they exchange.

- :mod:`.worker`: the GPU worker (``python -m r1build.evaluate.child.worker``), one per GPU, started and
  restarted by :class:`~r1build.evaluate.process.WorkerHandle`;
- :mod:`.harness`: the driver compute-sanitizer runs by path (standard library only);
- :mod:`.protocol`: the frame both sides read and write (standard library only);
- :mod:`.messages`: every request, reply and job file as a typed record (``TypedDict``: the wire stays JSON),
  imported by both sides (standard library only).

Nothing here imports the parent's modules except the reference loader the worker uses to time the numpy
reference on cupy; the parent imports only :mod:`.messages` and :mod:`.protocol` from here.
"""
