"""Key-value tables in the controller (the seed's "Key-Value-Tables Management" and "KVT Operations").

* ``records`` - the table record (state, configuration, epoch 0 with its segments and key ranges) and its JSON;
* ``store`` - :class:`KvtMetadataStore`, the records on the coordination store, beside the streams;
* ``tables`` - :class:`KeyValueTables`, the domain API: create and delete (with their table segments), list,
  configuration, current segments;
* ``errors`` - what the API raises.

The table segments of table ``scope/K`` are ``scope/K_kvtable/<n>.#epoch.0`` (:mod:`controller_client.kvt.model`);
clients route a key to one of them by its primary key (:mod:`controller_client.kvt.routing`).
"""

from controller.kvt.errors import KvtError, KvtNameTakenError, KvtNotFoundError
from controller.kvt.records import KvtRecord, KvtState
from controller.kvt.store import KvtMetadataStore
from controller.kvt.tables import KeyValueTables
from controller_client.kvt.model import KeyValueTableConfiguration

__all__ = [
    "KeyValueTableConfiguration",
    "KeyValueTables",
    "KvtError",
    "KvtMetadataStore",
    "KvtNameTakenError",
    "KvtNotFoundError",
    "KvtRecord",
    "KvtState",
]
