# The segstore image: every command of `segstore` (controller, segment store, ZooKeeper helper, demo); the one
# image docker-compose.yml builds and runs for all its segstore services.
#
# Java: pyspark (Spark 4) and the ZooKeeper jars it ships (`segstore zookeeper`) need Java 17 or later. The base is
# pinned to Debian 12 "bookworm", whose main archive has openjdk-17-jre-headless; the unpinned python:3.11-slim now
# follows Debian 13 "trixie", which has no Java 17 (openjdk-21 only). Checked with
#   docker run --rm python:3.11.14-slim-bookworm sh -c 'apt-get update -qq && apt-cache policy openjdk-17-jre-headless'
# (a candidate version, not "(none)"); moving to trixie means openjdk-21-jre-headless here.
FROM python:3.11.14-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/segstore
COPY pyproject.toml README.md LICENSE ./
COPY segstore_shared ./segstore_shared
COPY segment_store ./segment_store
COPY controller ./controller
COPY controller_client ./controller_client
COPY pravega_spark ./pravega_spark
COPY segstore_cli ./segstore_cli
COPY pyspark_segstore.py pyspark_segstore_kvt.py ./
RUN pip install --no-cache-dir .
ENTRYPOINT ["segstore"]
