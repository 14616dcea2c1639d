"""Media building blocks behind ``foundation.media.encoder``: ffmpeg command lines and codec choice
(``ffmpeg``), and frame/audio shaping (``frames``). Pure functions, unit-tested without ffmpeg."""
