// The weight store (include/dsinfer/weight_store.hpp): entries in a hash map keyed by (constant,
// kind, layout, target) (a model's thousands of constants register and look up in constant
// time), each holding its form strongly while the store owns it and weakly always, so that a
// form kernels still hold after a drop or a release is found again and reported. A target that
// names a device (is_device_target) is memory of its own: a device copy of a stored form is
// dropped like a packed one, and counts as held twice only beside another copy on that device.
#include "dsinfer/weight_store.hpp"

#include <algorithm>
#include <mutex>
#include <new>
#include <unordered_map>
#include <unordered_set>

namespace dsinfer {

const char* to_string(WeightKind kind) noexcept {
    switch (kind) {
        case WeightKind::stored: return "stored";
        case WeightKind::packed: return "packed";
        case WeightKind::derived: return "derived";
    }
    return "?";
}

namespace {

constexpr std::string_view kStoredLayout = "onnx";

struct Entry {
    std::uint64_t seq = 0;  ///< registration order (forms() lists in it)
    std::uint64_t source = 0;
    WeightKind kind = WeightKind::stored;
    std::string layout, target;
    std::type_index type = std::type_index(typeid(void));
    std::uint64_t bytes = 0;
    std::shared_ptr<const void> strong;  ///< set while the store owns the form
    std::weak_ptr<const void> weak;      ///< the form while anyone holds it
};

/// The map key of (source, kind, layout, target).
std::string entry_key(std::uint64_t source, WeightKind kind, std::string_view layout,
                      std::string_view target) {
    std::string k = std::to_string(source);
    k += static_cast<char>('0' + static_cast<int>(kind));
    k += layout;
    k += '\x1f';
    k += target;
    return k;
}

}  // namespace

struct WeightStore::Impl {
    mutable std::mutex mu;
    std::uint64_t next_id = 1, next_seq = 1;
    std::unordered_map<std::uint64_t, std::string> names;    ///< source id -> name
    std::unordered_map<const void*, std::uint64_t> by_data;  ///< stored data -> source id
    std::unordered_map<std::string, Entry> entries;          ///< by entry_key

    Entry* find(std::uint64_t source, WeightKind kind, std::string_view layout,
                std::string_view target) {
        auto it = entries.find(entry_key(source, kind, layout, target));
        return it == entries.end() ? nullptr : &it->second;
    }
    Entry* stored(std::uint64_t source) { return find(source, WeightKind::stored, kStoredLayout, {}); }
    /// Forgets entries nobody holds any more (their buffers are gone), and the data addresses
    /// of constants whose stored form went (the address may be reused). Linear.
    void prune() {
        for (auto it = entries.begin(); it != entries.end();)
            it = !it->second.strong && it->second.weak.expired() ? entries.erase(it) : std::next(it);
        for (auto it = by_data.begin(); it != by_data.end();)
            it = stored(it->second) != nullptr ? std::next(it) : by_data.erase(it);
    }
    Source add(std::string name, const Tensor& t) {
        const void* data = t.raw_data();
        if (data != nullptr) {
            if (auto it = by_data.find(data); it != by_data.end()) {
                const Entry* e = stored(it->second);
                if (e != nullptr && !e->weak.expired()) {
                    std::string& known = names[it->second];
                    if (known.empty()) known = std::move(name);
                    return Source{it->second};
                }
                by_data.erase(it);  // that constant is gone; the address was reused
            }
        }
        const std::uint64_t id = next_id++;
        names[id] = std::move(name);
        if (data != nullptr) by_data[data] = id;
        Entry e;
        e.seq = next_seq++;
        e.source = id;
        e.kind = WeightKind::stored;
        e.layout = std::string(kStoredLayout);
        e.type = std::type_index(typeid(Tensor));
        e.bytes = t.num_bytes();
        e.strong = std::make_shared<const Tensor>(t);
        e.weak = e.strong;
        entries.emplace(entry_key(id, WeightKind::stored, kStoredLayout, {}), std::move(e));
        return Source{id};
    }
};

WeightStore::WeightStore() : impl_(std::make_unique<Impl>()) {}
WeightStore::~WeightStore() = default;

WeightStore::Source WeightStore::add_constant(std::string name, const Tensor& t) {
    std::lock_guard<std::mutex> lock(impl_->mu);
    return impl_->add(std::move(name), t);
}

void WeightStore::release_constant(Source source) {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (Entry* e = impl_->stored(source.id)) e->strong.reset();
    impl_->prune();
}

WeightStore::Source WeightStore::source(const Tensor& t) {
    std::lock_guard<std::mutex> lock(impl_->mu);
    return impl_->add({}, t);
}

std::shared_ptr<const Tensor> WeightStore::constant(Source source) const {
    std::lock_guard<std::mutex> lock(impl_->mu);
    const Entry* e = impl_->stored(source.id);
    return e != nullptr ? std::static_pointer_cast<const Tensor>(e->weak.lock()) : nullptr;
}

StatusOr<std::shared_ptr<const void>> WeightStore::get_erased(
    Source source, WeightKind kind, std::string_view layout, std::string_view target,
    std::type_index type, bool own, const std::function<StatusOr<Erased>()>& build) {
    if (!source)
        return Status(ErrorCode::internal, "weight store: a form asked for no constant");
    std::lock_guard<std::mutex> lock(impl_->mu);
    Entry* e = impl_->find(source.id, kind, layout, target);
    if (e != nullptr && e->type != type)
        return Status::error(ErrorCode::internal, "weight store: form '", layout, "' for '",
                             target, "' of constant '", impl_->names[source.id],
                             "' was made with another type");
    if (e != nullptr) {
        if (std::shared_ptr<const void> v = e->weak.lock()) {
            if (own && !e->strong) e->strong = v;
            return v;
        }
    }
    StatusOr<Erased> built = Status(ErrorCode::internal, "weight store: no builder ran");
    try {
        built = build();
    } catch (const std::bad_alloc&) {
        return Status::error(ErrorCode::resource_exhausted, "out of memory building form '",
                             layout, "' of constant '", impl_->names[source.id], "'");
    }
    if (!built.is_ok()) return built.status();
    Erased made = std::move(built).value();
    if (!made.value)
        return Status::error(ErrorCode::internal, "weight store: the builder of form '", layout,
                             "' returned nothing");
    if (e == nullptr) {
        e = &impl_->entries[entry_key(source.id, kind, layout, target)];
        e->seq = impl_->next_seq++;
        e->source = source.id;
        e->kind = kind;
        e->layout = std::string(layout);
        e->target = std::string(target);
        e->type = type;
    }
    e->bytes = made.bytes;
    e->weak = made.value;
    e->strong = own ? made.value : nullptr;
    return made.value;
}

std::vector<WeightForm> WeightStore::forms() const {
    std::lock_guard<std::mutex> lock(impl_->mu);
    std::vector<const Entry*> order;
    for (const auto& [key, e] : impl_->entries) order.push_back(&e);
    std::sort(order.begin(), order.end(),
              [](const Entry* a, const Entry* b) { return a->seq < b->seq; });
    std::vector<WeightForm> out;
    for (const Entry* ep : order) {
        const Entry& e = *ep;
        const long uses = e.weak.use_count();
        if (uses == 0) continue;
        WeightForm f;
        auto it = impl_->names.find(e.source);
        if (it != impl_->names.end()) f.tensor = it->second;
        f.kind = e.kind;
        f.layout = e.layout;
        f.target = e.target;
        f.bytes = e.bytes;
        f.owned = e.strong != nullptr;
        f.holders = uses - (f.owned ? 1 : 0);
        out.push_back(std::move(f));
    }
    return out;
}

WeightBytes WeightStore::bytes() const {
    WeightBytes b;
    for (const WeightForm& f : forms()) {
        switch (f.kind) {
            case WeightKind::stored: b.stored += f.bytes; break;
            case WeightKind::packed: b.packed += f.bytes; break;
            case WeightKind::derived: b.derived += f.bytes; break;
        }
    }
    return b;
}

std::vector<std::string> WeightStore::held_twice() const {
    std::lock_guard<std::mutex> lock(impl_->mu);
    std::vector<const Entry*> sorted;
    for (const auto& [key, e] : impl_->entries) sorted.push_back(&e);
    std::sort(sorted.begin(), sorted.end(),
              [](const Entry* a, const Entry* b) { return a->seq < b->seq; });
    // Counted per memory: the host (every ISA target) and each device.
    std::unordered_map<std::string, int> same;
    std::unordered_set<std::uint64_t> listed;
    std::vector<std::uint64_t> order;
    for (const Entry* ep : sorted) {
        const Entry& e = *ep;
        if (e.kind == WeightKind::derived || e.weak.expired() || e.bytes == 0) continue;
        std::string where = std::to_string(e.source);
        if (is_device_target(e.target)) where += '@' + e.target;
        if (same[where]++ == 1 && listed.insert(e.source).second) order.push_back(e.source);
    }
    std::vector<std::string> out;
    for (std::uint64_t id : order) {
        auto it = impl_->names.find(id);
        out.push_back(it != impl_->names.end() && !it->second.empty()
                          ? it->second
                          : "(unnamed constant " + std::to_string(id) + ")");
    }
    return out;
}

std::uint64_t WeightStore::drop(std::string_view layout_prefix) {
    std::lock_guard<std::mutex> lock(impl_->mu);
    std::uint64_t freed = 0;
    for (auto& [key, e] : impl_->entries) {
        // The stored form itself goes only by release_constant; its device copies are
        // rebuilt from it like any other form.
        if ((e.kind == WeightKind::stored && !is_device_target(e.target)) || !e.strong) continue;
        if (e.layout.compare(0, layout_prefix.size(), layout_prefix) != 0) continue;
        const bool last = e.strong.use_count() == 1;
        e.strong.reset();
        if (last) freed += e.bytes;
    }
    impl_->prune();
    return freed;
}

}  // namespace dsinfer
