"""Tiny random-weight models of every family, built offline from configs with the production classes
(``builders``), so CPU tests load them with the same ``from_pretrained`` code as real weights."""
