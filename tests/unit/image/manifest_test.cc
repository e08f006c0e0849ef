// The image metadata parsers (pure) and entry path normalization.

#include <gtest/gtest.h>

#include <string>

#include "daemon/image/layer.h"
#include "daemon/image/manifest.h"

namespace b3os::image {
namespace {

const std::string kHex(64, 'a');
const std::string kDigest = "sha256:" + kHex;

std::string desc(const std::string& extra = "") {
  return R"({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": ")" + kDigest + R"(", "size": 7)" +
         extra + "}";
}

TEST(DockerManifest, OneImage) {
  auto m = parse_docker_manifest(R"([{"Config": "c.json", "RepoTags": ["a:b"], "Layers": ["x/layer.tar", "y/layer.tar"]}])");
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->config, "c.json");
  EXPECT_EQ(m->layers, (std::vector<std::string>{"x/layer.tar", "y/layer.tar"}));
}

TEST(DockerManifest, RefusesWhatIsNotOneImage) {
  struct Case {
    const char* json;
    const char* says;
  } cases[] = {
      {"[]", "image: manifest.json lists 0 images"},
      {R"([{"Config": "a", "Layers": []}, {"Config": "b", "Layers": []}])", "image: manifest.json lists 2 images"},
      {R"({"Config": "a"})", "image: manifest.json is not a list of images"},
      {R"([{"Layers": []}])", "image: manifest.json names no Config"},
      {R"([{"Config": "a"}])", "image: manifest.json has no Layers list"},
      {R"([{"Config": "a", "Layers": [1]}])", "image: manifest.json's Layers is not a list of strings"},
      {R"([{"Config": 5, "Layers": []}])", "image: manifest.json's Config is not a string"},
      {"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
       "nests deeper than 64 levels"},
      {"{", "image: manifest.json is not JSON"},
  };
  for (const auto& c : cases) {
    auto m = parse_docker_manifest(c.json);
    ASSERT_FALSE(m) << c.json;
    EXPECT_EQ(m.error().code, ErrorCode::kInvalidRequest);
    EXPECT_NE(m.error().message.find(c.says), std::string::npos) << m.error().message;
  }
}

TEST(OciIndex, OneManifestIsFollowed) {
  auto n = parse_oci(R"({"schemaVersion": 2, "manifests": [)" + desc() + "]}", "index.json");
  ASSERT_TRUE(n) << n.error().message;
  ASSERT_TRUE(n->next);
  EXPECT_EQ(n->next->digest, kDigest);
  EXPECT_EQ(n->next->size, 7u);
}

TEST(OciIndex, SeveralManifestsNeedExactlyOneLinuxAmd64) {
  const std::string arm = desc(R"(, "platform": {"os": "linux", "architecture": "arm64"})");
  const std::string amd = R"({"digest": "sha256:)" + std::string(64, 'b') +
                          R"(", "size": 9, "platform": {"os": "linux", "architecture": "amd64"}})";
  auto n = parse_oci(R"({"manifests": [)" + arm + "," + amd + "]}", "index.json");
  ASSERT_TRUE(n) << n.error().message;
  EXPECT_EQ(n->next->platform, "linux/amd64");
  EXPECT_EQ(n->next->size, 9u);

  auto none = parse_oci(R"({"manifests": [)" + desc() + "," + desc() + "]}", "index.json");
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("index.json lists 2 manifests and 0 of them for linux/amd64"), std::string::npos);
  auto two = parse_oci(R"({"manifests": [)" + amd + "," + amd + "]}", "index.json");
  ASSERT_FALSE(two);
  EXPECT_NE(two.error().message.find("and 2 of them for linux/amd64"), std::string::npos);
}

TEST(OciIndex, RefusesBadDescriptors) {
  struct Case {
    std::string json;
    const char* says;
  } cases[] = {
      {R"({"manifests": []})", "index.json lists no manifests"},
      {R"({"manifests": [{"digest": "sha512:abc", "size": 1}]})", "has digest \"sha512:abc\", not sha256"},
      {R"({"manifests": [{"digest": "sha256:../../etc/passwd", "size": 1}]})", "not sha256:<64 lowercase hex>"},
      {R"({"manifests": [{"digest": ")" + kDigest + R"(", "size": -1}]})", "has no size"},
      {R"({"manifests": [{"size": 1}]})", "has no digest"},
      {R"({"schemaVersion": 1, "manifests": []})", "schemaVersion 1, not 2"},
      {R"({"something": 1})", "is neither an OCI index nor an image manifest"},
      {R"([1])", "is not a JSON object"},
  };
  for (const auto& c : cases) {
    auto n = parse_oci(c.json, "index.json");
    ASSERT_FALSE(n) << c.json;
    EXPECT_TRUE(n.error().message.starts_with("image: ")) << n.error().message;
    EXPECT_NE(n.error().message.find(c.says), std::string::npos) << n.error().message;
  }
}

TEST(OciManifest, ConfigAndLayers) {
  const std::string layer = R"({"mediaType": "application/vnd.oci.image.layer.v1.tar+zstd", "digest": ")" + kDigest +
                            R"(", "size": 100})";
  auto n = parse_oci(R"({"schemaVersion": 2, "config": )" + desc() + R"(, "layers": [)" + layer + "," + layer + "]}",
                     "the manifest");
  ASSERT_TRUE(n) << n.error().message;
  EXPECT_FALSE(n->next);
  EXPECT_EQ(n->manifest.config.size, 7u);
  ASSERT_EQ(n->manifest.layers.size(), 2u);
  EXPECT_EQ(n->manifest.layers[1].size, 100u);

  const std::string enc = R"({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip+encrypted", "digest": ")" +
                          kDigest + R"(", "size": 100})";
  auto e = parse_oci(R"({"config": )" + desc() + R"(, "layers": [)" + enc + "]}", "the manifest");
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("the manifest layers[0] has media type"), std::string::npos) << e.error().message;
}

TEST(ImageConfig, Defaults) {
  auto c = parse_image_config(R"({"architecture": "amd64", "config": {"Entrypoint": ["/bin/sh", "-c"], "Cmd": null,
      "Env": ["A=1", "B=2"], "WorkingDir": "/w", "User": "app", "ExposedPorts": {"80/tcp": {}, "9000/udp": {}}},
      "rootfs": {"type": "layers", "diff_ids": [")" + kDigest + R"("]}})",
                              "the config");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->defaults.entrypoint, (std::vector<std::string>{"/bin/sh", "-c"}));
  EXPECT_TRUE(c->defaults.cmd.empty());
  EXPECT_EQ(c->defaults.env, (std::vector<std::string>{"A=1", "B=2"}));
  EXPECT_EQ(c->defaults.workdir, "/w");
  EXPECT_EQ(c->defaults.user, "app");
  EXPECT_EQ(c->defaults.exposed_ports, (std::vector<std::string>{"80/tcp", "9000/udp"}));
  EXPECT_EQ(c->diff_ids, std::vector<std::string>{kDigest});

  auto empty = parse_image_config("{}", "the config");
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->defaults.env.empty());
  EXPECT_TRUE(empty->diff_ids.empty());

  auto bad = parse_image_config(R"({"config": {"Cmd": "sh"}})", "the config");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "image: the config config's Cmd is not a list of strings");
  auto bad_id = parse_image_config(R"({"rootfs": {"diff_ids": ["md5:x"]}})", "the config");
  ASSERT_FALSE(bad_id);
}

TEST(BlobMember, OnlySha256Hex) {
  EXPECT_EQ(*blob_member(kDigest), "blobs/sha256/" + kHex);
  EXPECT_FALSE(blob_member("sha256:" + std::string(64, 'A')));
  EXPECT_FALSE(blob_member("sha256:" + std::string(63, 'a') + "/"));
  EXPECT_EQ(blob_hex("blobs/sha256/" + kHex), kHex);
  EXPECT_EQ(blob_hex("blobs/sha256/x"), "");
  EXPECT_EQ(blob_hex("abc/layer.tar"), "");
}

TEST(Quote, EscapesAndShortens) {
  EXPECT_EQ(quote("a\nb\"c"), R"("a\x0ab\x22c")");
  EXPECT_EQ(quote(std::string(200, 'x')).size(), 160u + 2 + 3);
}

TEST(EntryPath, NormalizesLikeTarAndRefusesDotDot) {
  EXPECT_EQ(*entry_path("./etc/passwd"), "etc/passwd");
  EXPECT_EQ(*entry_path("/etc//passwd/"), "etc/passwd");
  EXPECT_EQ(*entry_path("a/./b"), "a/b");
  EXPECT_EQ(*entry_path("./"), "");
  EXPECT_EQ(*entry_path("..."), "...");
  EXPECT_EQ(*entry_path(".wh..wh..opq"), ".wh..wh..opq");
  for (const char* p : {"..", "../x", "a/../b", "a/..", "/../../etc"}) {
    auto r = entry_path(p);
    ASSERT_FALSE(r) << p;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidRequest);
  }
  std::string deep;
  for (int i = 0; i < 257; ++i) deep += "d/";
  EXPECT_FALSE(entry_path(deep));
  EXPECT_FALSE(entry_path(std::string(4097, 'x')));
  EXPECT_TRUE(entry_path(std::string(4096, 'x')));
}

}  // namespace
}  // namespace b3os::image
