"""Policy decisions (retention, auto-scaling) as pure functions; the background loops that apply them live in
:mod:`controller.background`."""
