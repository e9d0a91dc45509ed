"""Key-value tables with Pravega's semantics.

* ``table``: :class:`KeyValueTable` (``StreamManager.key_value_table``), conditional and batch updates, reads;
* ``iterator``: keys or entries in key order over a range, one table segment or all merged;
* ``model``: configuration, keys, versions, entries and modifications;
* ``routing``: which partition (table segment) holds a primary key;
* ``errors``: the errors, as Pravega's client names them;
* ``proto``: the key-value table messages of ``Controller.proto``.
"""
