"""Security shared by the controller, the segment stores and the clients, as Pravega does it.

- ``passwords``: the password file (Pravega's ``user:hash:acl`` lines, PBKDF2-HMAC-SHA256 hashes in Pravega's
  encoding, so a file made by Pravega's admin tool works here and ours there) and the ``Basic`` credentials.
- ``acl``: resources (``prn::/``, ``prn::/scope:S``, ``prn::/scope:S/stream:T``, reader groups, key-value
  tables), permissions (``NONE`` < ``READ`` < ``READ_UPDATE``) and access-control lists (first match wins).
- ``tokens``: delegation tokens: HS512 JWTs the controller signs and the segment stores verify (one resource
  claim, ``exp`` always present, as Pravega's clients require), and the check of a token against a segment.
- ``tls``: TLS settings (certificate, key, optional client CA; a trust store for clients) and the
  ``ssl.SSLContext`` objects made from them.
- ``settings``: the authentication settings of the server processes, from flags or the environment.

The controller checks passwords and signs tokens; the segment stores verify tokens; the client library and the
Spark connector present credentials and TLS trust; the tools write password files and start servers with them.
"""
