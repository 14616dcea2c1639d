"""Media building blocks behind ``worker.media.encoder``: ffmpeg command lines and codec choice
(``ffmpeg``), and frame/audio shaping (``frames``). Pure functions, unit-tested without ffmpeg."""
