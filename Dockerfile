# The segstore image: every command of `segstore` (segment store, ZooKeeper helper, demo).
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/segstore
COPY pyproject.toml README.md ./
COPY segment_store ./segment_store
COPY controller ./controller
COPY controller_client ./controller_client
COPY pravega_spark ./pravega_spark
COPY pyspark_segstore.py pyspark_segstore_kvt.py ./
RUN pip install --no-cache-dir .
ENTRYPOINT ["segstore"]
