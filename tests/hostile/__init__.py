"""A hostile-server kit: a loopback proxy in front of the bundled simulator that answers one route
with an attack (``server``), the attacks as data (``scenarios``, payloads in ``payloads``, secret
spellings in ``forms``), one suite run per scenario measured for time and memory (``runner``), and
checks of every output a run leaves (``outputs``). A suite pointed at a server it does not control
must keep every output safe to open, render and log, and stay bounded in time and memory."""
