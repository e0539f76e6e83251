# edgestream (the edge side) as an OCI image, for those who build with a container engine and push
# to a registry:
#
#   docker build -f deploy/edgestream.Dockerfile -t registry.example/edgestream:0.1.0 \
#     --build-arg SOURCE_DATE_EPOCH=$(git log -1 --format=%ct) .
#
# The image holds the same files as deploy/build-images.sh's: the edgestream package's binary,
# only the shared libraries it links, their dpkg records and copyright files, passwd, group and
# nsswitch.conf. The builder stage makes the Debian packages (build-packages.sh) and that file
# tree (build-images.sh --rootfs); the image is FROM scratch. Not built in CI (there is no
# container engine there); integration.images tests build-images.sh's image. Set the pushed name
# in deploy/kubernetes/kustomization.yaml.
FROM debian:12 AS build
ARG SOURCE_DATE_EPOCH=0
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake pkg-config file \
      libwebsockets-dev libssl-dev libjson-c-dev libyaml-dev libcurl4-openssl-dev libseccomp-dev libnghttp2-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY stream stream
COPY certs certs
COPY cri cri
COPY cloudstream cloudstream
COPY edgestream edgestream
COPY deploy deploy
RUN deploy/build-packages.sh /build \
 && deploy/build-images.sh --debs /build/packages --rootfs /rootfs

FROM scratch
COPY --from=build /rootfs/edgestream/ /
USER 0:0
ENTRYPOINT ["/usr/bin/edgestream"]
