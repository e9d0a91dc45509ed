"""The controller's periodic work over the streams of the buckets it owns (:mod:`controller.cluster.buckets`).

* ``background`` - :class:`~controller.periodic.background.BackgroundWork`, the loops: each on its own period, each
  running a stream's work only while this controller owns the stream's bucket (transaction timeouts and resuming
  workflows a controller left midway, retention, auto-scaling, watermarks);
* ``retention`` - one stream's retention round (tail cuts, truncation by policy and subscribers);
* ``watermarking`` - one stream's watermark round (from its writers' marks);
* ``autoscaler`` - one stream's auto-scaling round (segment rates measured, the scale decided).

The decisions themselves are pure functions in :mod:`controller.policies`. This package sits below the domain API
(:mod:`controller.core` composes it) and above the workflows: it may import :mod:`controller.config`,
:mod:`controller.cluster`, :mod:`controller.metadata`, :mod:`controller.policies`, :mod:`controller.segment_ops`
and :mod:`controller.workflows`, never :mod:`controller.core`, :mod:`controller.rpc` or :mod:`controller.service`.
"""
