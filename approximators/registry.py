"""The registry of bdl-bench's own methods, name -> class: :mod:`approximators` fills it as it is imported
(``approximators.METHODS`` is this dict), and :mod:`approximators.boundary` reads it without importing the package
that imports it."""

METHODS: dict[str, type] = {}
