// swift-tools-version:5.9
import PackageDescription

let package = Package(
    name: "MLXEdgeKit",
    platforms: [
        .iOS(.v16),
        .macOS(.v13),
    ],
    products: [
        .library(name: "MLXEdgeKit", targets: ["MLXEdgeKit"]),
    ],
    targets: [
        .target(
            name: "MLXEdgeKit",
            path: "Sources/MLXEdgeKit"
        ),
        .testTarget(
            name: "MLXEdgeKitTests",
            dependencies: ["MLXEdgeKit"],
            path: "Tests/MLXEdgeKitTests",
            resources: [.copy("Fixtures")]
        ),
    ]
)
