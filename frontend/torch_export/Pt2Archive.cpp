#include "frontend/torch_export/Pt2Archive.h"

#include "runtime/support/UserFile.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Twine.h"

#include <zip.h>

#include <algorithm>

namespace loom::torch_export {

namespace {
llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}
} // namespace

llvm::Expected<std::unique_ptr<Pt2Archive>> Pt2Archive::open(llvm::StringRef path) {
  if (llvm::Error err = loom::checkRegularFile(path.str()))
    return err;
  int code = 0;
  zip *archive = zip_open(path.str().c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code);
  if (!archive) {
    zip_error_t error;
    zip_error_init_with_code(&error, code);
    std::string reason = zip_error_strerror(&error);
    zip_error_fini(&error);
    return fail("not a readable .pt2 archive (a zip file): " + reason);
  }
  std::unique_ptr<Pt2Archive> result(new Pt2Archive());
  result->archive_ = archive;
  zip_int64_t count = zip_get_num_entries(archive, 0);
  for (zip_int64_t i = 0; i < count; ++i)
    if (const char *name = zip_get_name(archive, i, 0))
      result->entries_.push_back(name);

  // The program is `<root>/models/<name>.json`; model.json is preferred when
  // several programs are stored.
  for (const std::string &entry : result->entries_) {
    llvm::StringRef name(entry);
    size_t models = name.find("models/");
    if (models == llvm::StringRef::npos || !name.ends_with(".json"))
      continue;
    if (models != 0 && name[models - 1] != '/')
      continue;
    llvm::StringRef file = name.substr(models + 7);
    if (file.contains('/'))
      continue;
    if (result->programEntry_.empty() || file == "model.json") {
      result->programEntry_ = entry;
      result->root_ = name.substr(0, models).str();
    }
  }
  if (result->programEntry_.empty()) {
    if (llvm::any_of(result->entries_, [](const std::string &entry) {
          return llvm::StringRef(entry).contains("/aotinductor/");
        }))
      return fail("the archive is an AOTInductor package (compiled code, no graph): save "
                  "the ExportedProgram itself with torch.export.save");
    return fail("the archive holds no models/*.json: not a torch.export program");
  }
  return std::move(result);
}

Pt2Archive::~Pt2Archive() {
  if (archive_)
    zip_discard(archive_);
}

bool Pt2Archive::contains(llvm::StringRef entry) const {
  return llvm::is_contained(entries_, entry);
}

llvm::Expected<std::string> Pt2Archive::read(llvm::StringRef entry) const {
  zip_stat_t stat;
  zip_stat_init(&stat);
  if (zip_stat(archive_, entry.str().c_str(), 0, &stat) != 0 ||
      !(stat.valid & ZIP_STAT_SIZE))
    return fail("the archive has no entry '" + entry + "'");
  zip_file_t *file = zip_fopen(archive_, entry.str().c_str(), 0);
  if (!file)
    return fail("cannot open '" + entry + "' in the archive: " + zip_strerror(archive_));
  // The declared size is the archive's word, not a fact: an 11 KB file may
  // declare a 4 GB entry. Memory grows with the bytes that actually arrive,
  // a chunk at a time, so a lie ends as "truncated data", not as a 4 GB
  // allocation.
  std::string bytes;
  zip_int64_t got = 0;
  constexpr zip_uint64_t kChunk = zip_uint64_t(1) << 24;
  while (zip_uint64_t(got) < stat.size) {
    zip_uint64_t want = std::min<zip_uint64_t>(kChunk, stat.size - zip_uint64_t(got));
    bytes.resize(size_t(got) + size_t(want));
    zip_int64_t n = zip_fread(file, bytes.data() + got, want);
    if (n < 0) {
      got = -1;
      break;
    }
    got += n;
    if (zip_uint64_t(n) < want)
      break;
  }
  if (got >= 0)
    bytes.resize(size_t(got));
  // libzip checks the entry's CRC when a read reaches its end.
  char pastEnd;
  if (got >= 0 && zip_fread(file, &pastEnd, 1) < 0)
    got = -1;
  std::string reason = got < 0 ? zip_file_strerror(file) : "";
  zip_fclose(file);
  if (got < 0 || zip_uint64_t(got) != stat.size)
    return fail("cannot read '" + entry + "' in the archive: " +
                (reason.empty() ? std::string("truncated data") : reason));
  return bytes;
}

} // namespace loom::torch_export
