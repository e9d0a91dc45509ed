"""The options of ``format("segstore")``, parsed once on the driver; every error is a
:class:`~pravega_spark.errors.SegstoreOptionError` naming the option as the user wrote it.

* ``names`` - every option name reads and writes take, with aliases (the README's table is checked against it);
* ``common`` - the case-insensitive, strict view of Spark's option map, and the stream target (controller, scope,
  stream, TLS trust, credentials);
* ``read`` / ``write`` - the options of reads and of writes;
* ``stream_creation`` - options ``allowCreateScope``, ``allowCreateStream`` and ``default*``, and creating a missing
  stream by them;
* ``stream_cut_text`` - stream cuts as the Pravega client's Base64 text (``StreamCut.asText()``);
* ``tier2_location`` - option ``tier2Location``.

Below ``read`` and ``write``: nothing here imports them.
"""
